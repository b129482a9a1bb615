// LibreChat's file flow against ptc-engine, with the requests LibreChat's backend makes
// (`api/server/services/Files/Code/crud.js` and `process.js`: axios and form-data, the headers
// it sets) and `@librechat/agents`' own calls (`fetchSessionFiles`, the code tool):
//
// 1. a user's CSV is uploaded (`POST /upload`, once as older LibreChat sends it with
//    `entity_id`, once as newer releases do with `kind`/`id`);
// 2. its freshness is checked (`GET /files/{session}?detail=summary`, `lastModified`);
// 3. the agents package lists the session (`detail=full`) and passes the files to the code
//    tool, whose program reads the CSV and draws a PNG;
// 4. the outputs are downloaded as LibreChat saves them (`responseType: 'arraybuffer'`) and
//    as it streams them to a browser (`responseType: 'stream'`, headers passed on).
//
// env: BASE_URL, API_KEY, CSV (a path), OUT (a directory). Prints a JSON report.
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import axios from 'axios';
import FormData from 'form-data';

const { BASE_URL, API_KEY, CSV, OUT } = process.env;
process.env.LIBRECHAT_CODE_BASEURL = BASE_URL;
const agents = await import('@librechat/agents');

const report = {};

// uploadCodeEnvFile, as LibreChat calls it.
async function upload(identity) {
  const form = new FormData();
  if (identity.entity_id) form.append('entity_id', identity.entity_id);
  if (identity.kind) {
    form.append('kind', identity.kind);
    form.append('id', identity.id);
  }
  form.append('file', fs.createReadStream(CSV), 'sales.csv');
  const options = {
    headers: {
      ...form.getHeaders(),
      'Content-Type': 'multipart/form-data',
      'User-Agent': 'LibreChat/1.0',
      'User-Id': 'user-1',
      'X-API-Key': API_KEY,
    },
    maxContentLength: Infinity,
    maxBodyLength: Infinity,
  };
  const response = await axios.post(`${BASE_URL}/upload`, form, options);
  const result = response.data;
  if (result.message !== 'success') throw new Error(`upload: ${JSON.stringify(result)}`);
  return result;
}

const older = await upload({ entity_id: 'agent_abc' });
const newer = await upload({ kind: 'user', id: 'user-1' });
report.upload = { older, newer };

// getSessionInfo: is the file still there, and since when?
const fileIdentifier = `${older.session_id}/${older.files[0].fileId}`;
const [sessionPath] = fileIdentifier.split('?');
const summary = await axios.get(`${BASE_URL}/files/${older.session_id}`, {
  params: { detail: 'summary', entity_id: 'agent_abc' },
  headers: { 'User-Agent': 'LibreChat/1.0', 'X-API-Key': API_KEY },
  timeout: 5000,
});
const lastModified = summary.data.find((file) => file.name.startsWith(sessionPath))?.lastModified;
report.lastModified = lastModified;
report.hoursOld = (Date.now() - new Date(lastModified).getTime()) / 3600000;

// The agents package: the session's files, passed to the code tool as LibreChat injects them.
const authHeaders = { 'X-API-Key': API_KEY };
const injected = await agents.fetchSessionFiles(BASE_URL, newer.storage_session_id, { kind: 'user', id: 'user-1' }, authHeaders);
report.injected = injected;
const code = `
import csv, struct, zlib
rows = list(csv.DictReader(open('/mnt/data/sales.csv')))
total = sum(int(r['units']) for r in rows)
w, h = 8 * len(rows), 32
def bar(x, y):
    r = rows[x // 8]
    return 255 if h - y <= int(r['units']) * h // max(int(q['units']) for q in rows) else 0
raw = b''.join(b'\\x00' + bytes(bar(x, y) for x in range(w)) for y in range(h))
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 0, 0, 0, 0)) \\
    + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
open('/mnt/data/chart.png', 'wb').write(png)
print(len(rows), total)
`;
const codeTool = agents.createCodeExecutionTool({ baseUrl: BASE_URL, authHeaders });
const message = await codeTool.invoke(
  { id: 'call_files', name: codeTool.name, type: 'tool_call', args: { lang: 'py', code }, _injected_files: injected },
  {},
);
report.content = String(message.content);
report.artifact = message.artifact;

// processCodeOutput: each output file, as LibreChat saves it.
report.downloads = [];
for (const file of message.artifact.files ?? []) {
  const response = await axios({
    method: 'get',
    url: `${BASE_URL}/download/${message.artifact.session_id}/${file.id}`,
    responseType: 'arraybuffer',
    headers: { 'User-Agent': 'LibreChat/1.0', 'X-API-Key': API_KEY },
    timeout: 15000,
  });
  const bytes = Buffer.from(response.data);
  fs.writeFileSync(path.join(OUT, file.name), bytes);
  // A PNG whose image data inflates to one filter byte and one byte per pixel per row.
  const width = bytes.readUInt32BE(16);
  const height = bytes.readUInt32BE(20);
  const idatLength = bytes.readUInt32BE(33);
  const pixels = zlib.inflateSync(bytes.subarray(41, 41 + idatLength));
  report.downloads.push({
    name: file.name, size: bytes.length, width, height,
    inflated: pixels.length === height * (width + 1),
  });
}

// getCodeOutputDownloadStream: what a browser gets through LibreChat.
const chart = (message.artifact.files ?? []).find((f) => f.name === 'chart.png');
const stream = await axios({
  method: 'get',
  url: `${BASE_URL}/download/${message.artifact.session_id}/${chart.id}`,
  responseType: 'stream',
  headers: { 'User-Agent': 'LibreChat/1.0', 'X-API-Key': API_KEY },
  timeout: 15000,
});
let streamed = 0;
for await (const part of stream.data) streamed += part.length;
report.streamed = {
  bytes: streamed,
  type: stream.headers['content-type'],
  length: Number(stream.headers['content-length']),
  disposition: stream.headers['content-disposition'],
};
// LibreChat's download route takes only ids of 21 characters of [A-Za-z0-9_-].
const isValidID = (s) => /^[A-Za-z0-9_-]{21}$/.test(s);
report.validIds = [older.session_id, older.files[0].fileId, message.artifact.session_id, chart.id].every(isValidID);
console.log(JSON.stringify(report));
