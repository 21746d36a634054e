// An agent written with the Vercel AI SDK (ai, @ai-sdk/openai, unmodified, pinned in
// package-lock.json) on the provider's default OpenAI model, which speaks the Responses API:
// one generateText or streamText call with a function tool, the SDK running the tool loop
// until the model answers without calling it. It takes its base URL and key from the
// environment (OPENAI_BASE_URL, OPENAI_API_KEY), as in a pod the proxy is injected into.
// test/agents runs it with bin/node against compaction-proxy (agents_test.go, aiSDK).
//
//	OPENAI_BASE_URL=URL/v1 OPENAI_API_KEY=KEY bin/node aisdkagent.mjs --task TASK [--stream] [--model M]
//
// The model is gpt-5.5 unless --model names another (gpt-4.1: one that does not reason, whose
// text the SDK sends back by reference).
//
// The tool, read_log, returns a file's content: the scripted model asks for a step's log
// with it. stdout is the final text.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { openai } from '@ai-sdk/openai';
import { z } from 'zod';

const { values: opts } = parseArgs({
  options: {
    task: { type: 'string' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string', default: 'gpt-5.5' },
  },
});

const call = {
  model: openai(opts.model),
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
