// An agent written with the official Node SDKs, unmodified, pointed at compaction-proxy by
// baseURL: it calls the model, runs the tool calls it asks for (a test run whose log is a
// few KB), and stops at the first answer without any. test/proxy/node_test.go runs it with
// bin/node for each protocol, streamed and not, and compares what it prints with what the
// scripted upstream sent.
//
//	bin/node loop.mjs --protocol openai|anthropic [--stream] --base-url URL --api-key KEY \
//		--system PROMPT --task TASK --dir tests
//
// The SDK calls: OpenAI chat.completions.create (not streamed) and chat.completions.stream
// (create with stream: true, plus the SDK's accumulator: finalChatCompletion), with
// stream_options.include_usage; Anthropic messages.create and messages.stream (finalMessage).
//
// stdout is one JSON object per line: for each turn {"turn", "response"} (not streamed: the
// SDK's parsed response) or {"turn", "events", "message"} (streamed: every chunk or event the
// SDK yielded, then the message its stream helper accumulated), then
// {"done": true, "turns", "text"}. Any error exits non-zero with the reason on stderr.
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { toolOutput } from './tool.mjs';

const { values: opts } = parseArgs({
  options: {
    protocol: { type: 'string' },
    stream: { type: 'boolean', default: false },
    'base-url': { type: 'string' },
    'api-key': { type: 'string' },
    system: { type: 'string' },
    task: { type: 'string' },
    dir: { type: 'string', default: 'tests' },
    'max-turns': { type: 'string', default: '200' },
  },
});

const finalText = 'All tests pass. Done.';

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function expectArgs(turn, got) {
  const want = `{"cmd":"pytest -k case${turn}"}`;
  if (got !== want) {
    throw new Error(`turn ${turn}: tool call arguments ${got}, want the upstream's ${want}`);
  }
}

function expectFinal(turn, text) {
  if (text !== finalText) {
    throw new Error(`turn ${turn}: final answer ${JSON.stringify(text)}, want the upstream's`);
  }
  emit({ done: true, turns: turn, text });
}

async function openaiLoop(maxTurns) {
  const client = new OpenAI({ baseURL: opts['base-url'] + '/v1', apiKey: opts['api-key'], maxRetries: 0 });
  const messages = [
    { role: 'system', content: opts.system },
    { role: 'user', content: opts.task },
  ];
  for (let turn = 1; turn <= maxTurns; turn++) {
    const start = Date.now();
    let message;
    if (opts.stream) {
      const stream = client.chat.completions.stream({
        model: 'gpt-test',
        messages,
        stream_options: { include_usage: true },
      });
      // A copy of each chunk as it arrived, as for Anthropic's stream below.
      const events = [];
      stream.on('chunk', (chunk) => events.push(structuredClone(chunk)));
      let yielded = 0;
      for await (const _ of stream) {
        yielded++;
      }
      if (yielded !== events.length) {
        throw new Error(`turn ${turn}: the stream yielded ${yielded} chunks, its chunk listener saw ${events.length}`);
      }
      const completion = await stream.finalChatCompletion();
      message = completion.choices[0].message;
      emit({ turn, ms: Date.now() - start, events, message: completion });
    } else {
      const response = await client.chat.completions.create({ model: 'gpt-test', messages });
      message = response.choices[0].message;
      emit({ turn, ms: Date.now() - start, response });
    }
    const calls = message.tool_calls ?? [];
    messages.push({ role: 'assistant', content: message.content ?? null, ...(calls.length ? { tool_calls: calls } : {}) });
    if (calls.length === 0) {
      expectFinal(turn, message.content);
      return;
    }
    for (const call of calls) {
      expectArgs(turn, call.function.arguments);
      messages.push({ role: 'tool', tool_call_id: call.id, content: toolOutput(opts.dir, turn) });
    }
  }
  throw new Error('the loop did not end');
}

async function anthropicLoop(maxTurns) {
  const client = new Anthropic({ baseURL: opts['base-url'], apiKey: opts['api-key'], maxRetries: 0 });
  const params = { model: 'claude-test', max_tokens: 1024, system: [{ type: 'text', text: opts.system }] };
  const messages = [{ role: 'user', content: [{ type: 'text', text: opts.task }] }];
  for (let turn = 1; turn <= maxTurns; turn++) {
    const start = Date.now();
    let message;
    if (opts.stream) {
      const stream = client.messages.stream({ ...params, messages });
      // The helper accumulates the message into message_start's own object as the later
      // events arrive: keep a copy of each event as it arrived.
      const events = [];
      stream.on('streamEvent', (event) => events.push(structuredClone(event)));
      let yielded = 0;
      for await (const _ of stream) {
        yielded++;
      }
      if (yielded !== events.length) {
        throw new Error(`turn ${turn}: the stream yielded ${yielded} events, its streamEvent listener saw ${events.length}`);
      }
      message = await stream.finalMessage();
      emit({ turn, ms: Date.now() - start, events, message });
    } else {
      message = await client.messages.create({ ...params, messages });
      emit({ turn, ms: Date.now() - start, response: message });
    }
    messages.push({ role: 'assistant', content: message.content });
    const results = [];
    let text = '';
    for (const block of message.content) {
      if (block.type === 'tool_use') {
        expectArgs(turn, JSON.stringify(block.input));
        results.push({ type: 'tool_result', tool_use_id: block.id, content: toolOutput(opts.dir, turn) });
      } else if (block.type === 'text') {
        text += block.text;
      }
    }
    if (results.length === 0) {
      expectFinal(turn, text);
      return;
    }
    messages.push({ role: 'user', content: results });
  }
  throw new Error('the loop did not end');
}

const maxTurns = Number(opts['max-turns']);
if (opts.protocol === 'openai') {
  await openaiLoop(maxTurns);
} else if (opts.protocol === 'anthropic') {
  await anthropicLoop(maxTurns);
} else {
  throw new Error(`--protocol ${opts.protocol}: want openai or anthropic`);
}
