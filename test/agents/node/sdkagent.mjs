// An agent written with the OpenAI Agents SDK for JavaScript (@openai/agents, unmodified,
// pinned in package-lock.json): one Agent with a function tool, run by the SDK's runner
// until the model answers without calling it. test/agents runs it with bin/node against
// compaction-proxy (agents_test.go, agentsSDK).
//
//	bin/node sdkagent.mjs --base-url URL/v1 --api-key KEY --task TASK [--stream]
//
// The SDK's default model provider speaks the Responses API (POST {base-url}/responses);
// its OpenAI client is the one setDefaultOpenAIClient sets. Tracing is off (it would export
// to api.openai.com). The tool, read_log, returns a file's content: the scripted model asks
// for a step's log with it. stdout is the run's final output.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';
import { z } from 'zod';

const { values: opts } = parseArgs({
  options: {
    'base-url': { type: 'string' },
    'api-key': { type: 'string' },
    task: { type: 'string' },
    stream: { type: 'boolean', default: false },
    'max-turns': { type: 'string', default: '100' },
  },
});

setTracingDisabled(true);
setOpenAIAPI('responses');
setDefaultOpenAIClient(new OpenAI({ baseURL: opts['base-url'], apiKey: opts['api-key'], maxRetries: 0 }));

const readLog = tool({
  name: 'read_log',
  description: 'Read a log file and return its content.',
  parameters: z.object({ path: z.string().describe('The absolute path of the log file') }),
  execute: async ({ path }) => readFile(path, 'utf8'),
});

const agent = new Agent({
  name: 'Log checker',
  instructions: 'You check test logs. Read each log you are asked for with read_log, then report.',
  model: 'gpt-5.5',
  tools: [readLog],
});

const maxTurns = Number(opts['max-turns']);
let output;
if (opts.stream) {
  const result = await run(agent, opts.task, { stream: true, maxTurns });
  for await (const _ of result) {
    // Drain the stream: the SDK accumulates the run.
  }
  await result.completed;
  output = result.finalOutput;
} else {
  const result = await run(agent, opts.task, { maxTurns });
  output = result.finalOutput;
}
process.stdout.write(`${output}\n`);
