// An agent written with the Vercel AI SDK (ai, @ai-sdk/openai, @ai-sdk/google, unmodified,
// pinned in package-lock.json): one generateText or streamText call with a function tool,
// the SDK running the tool loop until the model answers without calling it. It takes its
// base URL and key from the environment, as in a pod the proxy is injected into. test/agents
// runs it with bin/node against compaction-proxy (agents_test.go, aiSDK).
//
//	OPENAI_BASE_URL=URL/v1 OPENAI_API_KEY=KEY bin/node aisdkagent.mjs --task TASK [--stream] [--model M]
//	GOOGLE_GEMINI_BASE_URL=URL GOOGLE_GENERATIVE_AI_API_KEY=KEY bin/node aisdkagent.mjs --provider google --task TASK
//
// On OpenAI (the default provider) the model speaks the Responses API; it is gpt-5.5 unless
// --model names another (gpt-4.1: one that does not reason, whose text the SDK sends back by
// reference). On Google the model is gemini-2.5-pro; @ai-sdk/google reads no base URL from
// the environment, so the script passes it the one the injection sets for Gemini
// (GOOGLE_GEMINI_BASE_URL, the root: the SDK's base is its /v1beta).
//
// The tool, read_log, returns a file's content: the scripted model asks for a step's log
// with it. stdout is the final text.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { openai } from '@ai-sdk/openai';
import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { z } from 'zod';

const { values: opts } = parseArgs({
  options: {
    task: { type: 'string' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string' },
    provider: { type: 'string', default: 'openai' },
  },
});

let model;
switch (opts.provider) {
  case 'openai':
    model = openai(opts.model ?? 'gpt-5.5');
    break;
  case 'google': {
    const base = process.env.GOOGLE_GEMINI_BASE_URL;
    model = createGoogleGenerativeAI(base ? { baseURL: `${base.replace(/\/+$/, '')}/v1beta` } : {})(opts.model ?? 'gemini-2.5-pro');
    break;
  }
  default:
    throw new Error(`--provider ${opts.provider}: want openai or google`);
}

const call = {
  model,
  system: 'You check test logs. Read each log you are asked for with read_log, then report.',
  prompt: opts.task,
  tools: {
    read_log: tool({
      description: 'Read a log file and return its content.',
      inputSchema: z.object({ path: z.string().describe('The absolute path of the log file') }),
      execute: async ({ path }) => readFile(path, 'utf8'),
    }),
  },
  stopWhen: stepCountIs(100),
  maxRetries: 0,
};
let text;
if (opts.stream) {
  let failure;
  const result = streamText({ ...call, onError: ({ error }) => { failure = error; } });
  for await (const part of result.fullStream) {
    if (part.type === 'error' || part.type === 'tool-error') {
      failure = part.error;
    }
  }
  if (failure) {
    throw failure;
  }
  text = await result.text;
} else {
  text = (await generateText(call)).text;
}
process.stdout.write(`${text}\n`);
