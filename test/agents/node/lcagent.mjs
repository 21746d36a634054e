// An agent written with LangChain.js (@langchain/openai, @langchain/core, unmodified, pinned
// in package-lock.json): ChatOpenAI with a bound tool, and the tool loop LangChain's agents
// run, each step's AIMessage and ToolMessages appended to the history. It takes its base URL
// and key from the environment (OPENAI_BASE_URL, OPENAI_API_KEY), as in a pod the proxy is
// injected into. test/agents runs it with bin/node against compaction-proxy (agents_test.go,
// langChain).
//
//	OPENAI_BASE_URL=URL/v1 OPENAI_API_KEY=KEY bin/node lcagent.mjs --task TASK [--stream] [--model M]
//
// The model is gpt-5.5 (a reasoning model: LangChain sends the system prompt as a developer
// message) unless --model names another. The tool, read_log, returns a file's content: the
// scripted model asks for a step's log with it. stdout is the final text.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage, SystemMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { z } from 'zod';

const { values: opts } = parseArgs({
  options: {
    task: { type: 'string' },
    stream: { type: 'boolean', default: false },
    model: { type: 'string', default: 'gpt-5.5' },
  },
});

const readLog = tool(async ({ path }) => readFile(path, 'utf8'), {
  name: 'read_log',
  description: 'Read a log file and return its content.',
  schema: z.object({ path: z.string().describe('The absolute path of the log file') }),
});
const model = new ChatOpenAI({ model: opts.model, streaming: opts.stream, maxRetries: 0 }).bindTools([readLog]);
const messages = [
  new SystemMessage('You check test logs. Read each log you are asked for with read_log, then report.'),
  new HumanMessage(opts.task),
];
for (let step = 0; ; step++) {
  if (step === 100) {
    throw new Error('no final answer after 100 steps');
  }
  const ai = await model.invoke(messages);
  messages.push(ai);
  if (!ai.tool_calls?.length) {
    process.stdout.write(`${ai.text}\n`);
    break;
  }
  for (const call of ai.tool_calls) {
    messages.push(await readLog.invoke(call)); // a ToolMessage answering the call
  }
}
