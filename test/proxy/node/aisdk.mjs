// An agent written with the Vercel AI SDK (ai, with @ai-sdk/openai's chat completions model
// and @ai-sdk/anthropic), unmodified: one generateText or streamText call with one tool and
// a step limit, the SDK running the tool loop itself. The providers take their base URL and
// key from the environment, as in a pod the operator injects the proxy into:
// OPENAI_BASE_URL=http://127.0.0.1:4141/v1, ANTHROPIC_BASE_URL=http://127.0.0.1:4141 (no
// /v1: Claude Code appends /v1/messages, the AI SDK only /messages). test/proxy/node_test.go
// runs it with bin/node for each protocol, streamed and not, and compares what it prints
// with what the scripted upstream sent.
//
//	OPENAI_BASE_URL=... OPENAI_API_KEY=... bin/node aisdk.mjs --protocol openai [--stream] \
//		--system PROMPT --task TASK --dir tests
//
// stdout is loop.mjs's, a line per step: {"turn", "response"} (not streamed: the response
// body the SDK kept, include.responseBody) or {"turn", "events", "usage"} (streamed: the
// provider's chunks, includeRawChunks, and the step's usage as the SDK counted it), then
// {"done": true, "turns", "text"}. Any error exits non-zero with the reason on stderr.
import { parseArgs } from 'node:util';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { z } from 'zod';
import { toolOutput } from './tool.mjs';

const { values: opts } = parseArgs({
  options: {
    protocol: { type: 'string' },
    stream: { type: 'boolean', default: false },
    system: { type: 'string' },
    task: { type: 'string' },
    dir: { type: 'string', default: 'tests' },
  },
});

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// The provider's model as an AI SDK agent picks it. For gpt-5 (a reasoning model) the SDK
// sends the system prompt as a developer message.
let model;
if (opts.protocol === 'openai') {
  model = createOpenAI().chat('gpt-5.5');
} else if (opts.protocol === 'anthropic') {
  model = createAnthropic()('claude-opus-5-5');
} else {
  throw new Error(`unknown protocol ${opts.protocol}`);
}

let turn = 0;
const run = tool({
  description: 'Run a shell command and return its output.',
  inputSchema: z.object({ cmd: z.string() }),
  execute: async ({ cmd }) => {
    turn++;
    if (cmd !== `pytest -k case${turn}`) {
      throw new Error(`step ${turn}: command ${JSON.stringify(cmd)}, want the upstream's "pytest -k case${turn}"`);
    }
    return toolOutput(opts.dir, turn);
  },
});

const call = {
  model,
  system: opts.system,
  prompt: opts.task,
  tools: { run },
  stopWhen: stepCountIs(200),
  maxRetries: 0,
};
let steps, text;
if (opts.stream) {
  // A tool error would end the stream without an exception: onError makes it one.
  let failure;
  const result = streamText({ ...call, includeRawChunks: true, onError: ({ error }) => { failure = error; } });
  let events = [];
  let n = 0;
  for await (const part of result.fullStream) {
    if (part.type === 'raw') {
      events.push(part.rawValue);
    } else if (part.type === 'finish-step') {
      n++;
      emit({ turn: n, events, usage: { input: part.usage.inputTokens, output: part.usage.outputTokens } });
      events = [];
    } else if (part.type === 'error' || part.type === 'tool-error') {
      failure = part.error;
    }
  }
  if (failure) {
    throw failure;
  }
  steps = (await result.steps).length;
  text = await result.text;
} else {
  const result = await generateText({ ...call, include: { responseBody: true } });
  result.steps.forEach((step, i) => emit({ turn: i + 1, response: step.response.body }));
  steps = result.steps.length;
  text = result.text;
}
emit({ done: true, turns: steps, text });
