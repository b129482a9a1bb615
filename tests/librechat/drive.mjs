// Drives ptc-engine's HTTP Code API with LibreChat's own client code (@librechat/agents): its
// programmatic tool (`POST /exec/programmatic` and continuations) and its code tool
// (`POST /exec`), invoked the way LibreChat's graph invokes them. Prints, for every case, what
// the model would see: the tool message's content and status.
//
// stdin: [{"name", "tool": "ptc" | "exec", "code", "timeout"?, "lang"?}] (`lang`, the code tool's:
// "py" unless given); env: BASE_URL, API_KEY.
import { createRequire } from 'node:module';

const BASE_URL = process.env.BASE_URL;
// The plain code tool reads its base URL when the module loads.
process.env.LIBRECHAT_CODE_BASEURL = BASE_URL;
const agents = await import('@librechat/agents');
const { tool } = createRequire(import.meta.url)('@langchain/core/tools');

const authHeaders = { 'X-API-Key': process.env.API_KEY };
const addSchema = {
  type: 'object',
  properties: { a: { type: 'number' }, b: { type: 'number' } },
  required: ['a', 'b'],
};
const hostTools = [
  tool(async ({ a, b }) => a + b, { name: 'add', description: 'Adds two numbers.', schema: addSchema }),
  tool(async () => { throw new Error('the weather service is down'); }, {
    name: 'weather', description: 'Weather for a city.',
    schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }),
];
// What LibreChat's tool node injects for the programmatic tool: the tools code may call.
const toolMap = new Map(hostTools.map((t) => [t.name, t]));
const toolDefs = hostTools.map((t) => ({
  name: t.name, description: t.description, parameters: t.schema, allowed_callers: ['code_execution'],
}));

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const cases = JSON.parse(Buffer.concat(chunks).toString('utf8'));

const results = [];
for (const c of cases) {
  let toolObj, call;
  const args = { code: c.code, ...(c.timeout ? { timeout: c.timeout } : {}) };
  if (c.tool === 'ptc') {
    toolObj = agents.createProgrammaticToolCallingTool({ baseUrl: BASE_URL, authHeaders, maxRoundTrips: 50 });
    call = { id: `call_${c.name}`, name: toolObj.name, type: 'tool_call', args, toolMap, toolDefs };
  } else {
    toolObj = agents.createCodeExecutionTool({ baseUrl: BASE_URL, authHeaders });
    call = { id: `call_${c.name}`, name: toolObj.name, type: 'tool_call', args: { lang: c.lang ?? 'py', ...args } };
  }
  try {
    const message = await toolObj.invoke(call, {});
    results.push({ name: c.name, status: message.status ?? 'success', content: String(message.content) });
  } catch (e) {
    // LibreChat's tool node turns a thrown error into this tool message.
    results.push({ name: c.name, status: 'error', content: `Error: ${e.message}\n Please fix your mistakes.` });
  }
}
console.log(JSON.stringify(results));
