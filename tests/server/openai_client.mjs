// openai_client.mjs - drives `nexus serve` with the official openai npm client (pinned in the
// Makefile, installed into build-npm/).
// Usage: node openai_client.mjs PORT API_KEY EMBED_DIM OPENAI_PACKAGE_DIR
// Prints one line per check and "ALL OK" at the end; exits non-zero on the first failure.
import { check, checksPassed, loadOpenAI } from './checks.mjs';

const [port, key, dimArg, pkgDir] = process.argv.slice(2);
const OpenAI = await loadOpenAI(pkgDir);
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 30000 });

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === 'nexus', 'models.list');

const ask = { model: 'nexus', messages: [{ role: 'system', content: 'You tell stories.' },
  { role: 'user', content: 'Once upon a time' }], max_tokens: 16, seed: 5, temperature: 1 };
const a = await client.chat.completions.create(ask);
const text = a.choices[0].message.content;
check(typeof text === 'string' && a.choices[0].message.role === 'assistant', 'chat content');
check(a.usage.completion_tokens <= 16 && a.usage.prompt_tokens > 0 &&
      a.usage.total_tokens === a.usage.prompt_tokens + a.usage.completion_tokens, 'chat usage');
check(['stop', 'length'].includes(a.choices[0].finish_reason), 'chat finish_reason');
const b = await client.chat.completions.create(ask);
check(b.choices[0].message.content === text, 'same seed, same answer');
const c = await client.chat.completions.create({ ...ask, seed: 6 });
console.log(`  (seed 5: ${JSON.stringify(text)}; seed 6: ${JSON.stringify(c.choices[0].message.content)})`);

const stream = await client.chat.completions.create({ ...ask, stream: true,
  stream_options: { include_usage: true } });
let streamed = '', usage = null, finish = null, chunks = 0;
for await (const ch of stream) {
  chunks++;
  if (ch.usage) usage = ch.usage;
  if (ch.choices.length) {
    streamed += ch.choices[0].delta.content ?? '';
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
}
check(streamed === text, `stream equals non-stream (${chunks} chunks)`);
check(usage && usage.completion_tokens === a.usage.completion_tokens, 'stream usage chunk');
check(finish === a.choices[0].finish_reason, 'stream finish_reason');

const lp = await client.chat.completions.create({ ...ask, logprobs: true, top_logprobs: 2 });
const content = lp.choices[0].logprobs.content;
check(content.length === lp.usage.completion_tokens &&
      content.every(t => t.logprob <= 0 && t.top_logprobs.length === 2 &&
                         t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob), 'logprobs');

const comp = await client.completions.create({ model: 'nexus', prompt: 'Once upon a time',
  max_tokens: 8, temperature: 0 });
check(typeof comp.choices[0].text === 'string' && comp.choices[0].text.length > 0 &&
      comp.usage.completion_tokens <= 8, 'completions');

const dim = Number(dimArg);
const emb = await client.embeddings.create({ model: 'nexus', input: ['hello world', 'a b c'] });
check(emb.data.length === 2 && emb.data.every((d, i) => d.index === i &&
      d.embedding.length === dim), 'embeddings (base64 decoded by the client)');
const norm = Math.hypot(...emb.data[0].embedding);
check(Math.abs(norm - 1) < 1e-3, `embedding is normalised (${norm.toFixed(5)})`);
const embf = await client.embeddings.create({ model: 'nexus', input: 'hello world',
  encoding_format: 'float' });
check(embf.data[0].embedding.every((v, i) => Math.abs(v - emb.data[0].embedding[i]) < 1e-6),
      'embeddings as floats equal base64');

try {
  await client.chat.completions.create({ ...ask, top_logprobs: 2 });
  check(false, '400 for top_logprobs without logprobs');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'top_logprobs',
        '400 BadRequestError with param');
}
try {
  await client.chat.completions.create({ ...ask, messages: [] });
  check(false, '400 for empty messages');
} catch (e) {
  check(e.status === 400 && /messages/.test(e.message), '400 for empty messages');
}
const wrong = new OpenAI({ baseURL, apiKey: key + 'x', maxRetries: 0 });
try {
  await wrong.models.list();
  check(false, '401 with a wrong key');
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, '401 AuthenticationError');
}
// tool calls: the client sees OpenAI's tool_calls shape; the arguments follow the full schema
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
  parameters: { type: 'object', properties: { location: { type: 'string', maxLength: 16 },
    unit: { type: 'string', enum: ['c', 'f'] } }, required: ['location', 'unit'] } } }];
const tc = await client.chat.completions.create({ ...ask, max_tokens: 80, tools, tool_choice: 'required' });
const call = tc.choices[0].message.tool_calls?.[0];
const targs = call ? JSON.parse(call.function.arguments) : null;
check(tc.choices[0].finish_reason === 'tool_calls' && call.type === 'function' &&
      call.function.name === 'get_weather' && typeof targs.location === 'string' &&
      ['c', 'f'].includes(targs.unit), 'tool call under the schema');
// and the result goes back as a tool message for the next turn
const follow = await client.chat.completions.create({ ...ask, messages: [...ask.messages,
  tc.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '12 degrees' }] });
check(typeof follow.choices[0].message.content === 'string', 'tool result round trip');
const ts = await client.chat.completions.create({ ...ask, max_tokens: 80, tools, tool_choice: 'required',
  stream: true });
let sname = '', sargs = '';
for await (const ch of ts) {
  for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
    sname += d.function?.name ?? '';
    sargs += d.function?.arguments ?? '';
  }
}
check(sname === 'get_weather' && JSON.parse(sargs).unit !== undefined, 'streamed tool call');
const js = await client.chat.completions.create({ ...ask, response_format: { type: 'json_schema',
  json_schema: { name: 'r', schema: { type: 'object', properties: { n: { type: 'integer',
    minimum: 0, maximum: 5 } }, required: ['n'] } } } });
const jv = JSON.parse(js.choices[0].message.content);
check(Number.isInteger(jv.n) && jv.n >= 0 && jv.n <= 5, 'json_schema output validates');
// abort a stream half way: the server must stay usable
const ctl = new AbortController();
const s2 = await client.chat.completions.create({ ...ask, max_tokens: 200, stream: true },
  { signal: ctl.signal });
try {
  let k = 0;
  for await (const ch of s2) { if (++k === 3) ctl.abort(); }
} catch (e) { /* aborted */ }
const after = await client.chat.completions.create(ask);
check(after.choices[0].message.content === text, 'served after an aborted stream');
console.log(`ALL OK (${checksPassed()} checks)`);
