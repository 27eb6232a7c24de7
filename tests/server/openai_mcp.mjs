// openai_mcp.mjs - `nexus serve --mcp` (server-side tools) driven by the official openai npm
// client: the server routes the MCP servers' tools into the prompt, runs the calls the model
// makes and answers with the result fed back. The server reports its steps under "nexus".
// Usage: node openai_mcp.mjs PORT OPENAI_PACKAGE_DIR
// Prints one line per check and "ALL OK" at the end; exits non-zero on the first failure.
import { check, checksPassed, loadOpenAI } from './checks.mjs';

const [port, pkgDir] = process.argv.slice(2);
const OpenAI = await loadOpenAI(pkgDir);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none',
  maxRetries: 0, timeout: 60000 });

// a named tool: the server must call echo (server-everything) with schema-valid arguments,
// feed the result back and answer
const echoAsk = { model: 'nexus', messages: [{ role: 'user', content: 'Echo hello back to me' }],
  max_tokens: 96, temperature: 0, tool_choice: { type: 'function', function: { name: 'echo' } } };
const a = await client.chat.completions.create(echoAsk);
const steps = a.nexus?.tool_steps ?? [];
console.log(`  steps: ${JSON.stringify(steps).slice(0, 400)}`);
check(steps.length >= 1 && steps[0].name === 'echo', 'the server called echo');
const args = JSON.parse(steps[0].arguments);
check(typeof args.message === 'string' && steps[0].schema_valid, 'echo arguments schema-valid');
check(!steps[0].is_error && steps[0].bytes > 0, 'echo returned a result');
check(a.nexus.routes[0].hits.some(h => h.name === 'echo'), 'echo among the routed tools');
check(a.nexus.routes[0].hits.length <= 5, 'at most k tools offered');
check(typeof a.choices[0].message.content === 'string' && !a.choices[0].message.tool_calls,
      'the client gets an answer, not a call');
check(a.usage.prompt_tokens > 0 && a.usage.completion_tokens > 0, 'usage over the steps');
const a2 = await client.chat.completions.create(echoAsk);
check(JSON.stringify(a2.nexus.tool_steps.map(s => s.arguments)) ===
      JSON.stringify(steps.map(s => s.arguments)) &&
      a2.choices[0].message.content === a.choices[0].message.content, 'greedy: same steps again');

// a tool whose server crashes in the middle of the call: a tool error, the request still answered
const b = await client.chat.completions.create({ ...echoAsk,
  messages: [{ role: 'user', content: 'explode the process' }],
  tool_choice: { type: 'function', function: { name: 'explode' } } });
const bs = b.nexus.tool_steps;
console.log(`  crash step: ${JSON.stringify(bs[0]).slice(0, 300)}`);
check(bs[0].name === 'explode' && bs[0].is_error, 'a crashing MCP server is a tool error');
check(typeof b.choices[0].message.content === 'string', 'answered after the crash');
// the server is started again on the next call
const c = await client.chat.completions.create(echoAsk);
check(c.nexus.tool_steps[0].name === 'echo' && !c.nexus.tool_steps[0].is_error,
      'other servers unaffected');

// streamed: the answer after the steps arrives as chunks
const st = await client.chat.completions.create({ ...echoAsk, stream: true,
  stream_options: { include_usage: true } });
let text = '', finish = null, usage = null;
for await (const ch of st) {
  if (ch.usage) usage = ch.usage;
  if (ch.choices.length) {
    text += ch.choices[0].delta.content ?? '';
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
}
check(text === a.choices[0].message.content && finish === a.choices[0].finish_reason,
      'stream equals non-stream');
check(usage && usage.total_tokens === a.usage.total_tokens, 'stream usage');

// a named tool that no server has is the client's error
let status = 0;
try {
  await client.chat.completions.create({ ...echoAsk,
    tool_choice: { type: 'function', function: { name: 'no_such_tool' } } });
} catch (e) { status = e.status; }
check(status === 400, 'unknown named tool: 400');

// tool_choice none: no tools offered, a plain answer
const d = await client.chat.completions.create({ ...echoAsk, tool_choice: 'none' });
check(!d.nexus && typeof d.choices[0].message.content === 'string', 'tool_choice none');

// the client's own tools go back to the client, as without --mcp
const e = await client.chat.completions.create({ ...echoAsk, tool_choice: 'required',
  tools: [{ type: 'function', function: { name: 'get_time', parameters: { type: 'object',
    properties: { zone: { type: 'string' } }, required: ['zone'] } } }] });
check(e.choices[0].message.tool_calls?.[0]?.function.name === 'get_time' && !e.nexus,
      'client tools are returned to the client');
console.log(`ALL OK (${checksPassed()} checks)`);
