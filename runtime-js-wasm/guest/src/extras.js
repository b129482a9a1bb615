// What programs reach beyond their tools, made at the first use of one of its names
// (`runtime.js`): `fs` (/mnt/data, shaped like Node's `fs/promises`; files.rs does the work)
// and `fetch` with `Headers` (net.rs makes each request, under the network policy).
// Evaluated as `ptc:runtime`; called with the two host objects, it returns the three.
(function (files, net) {
  'use strict';
  // /mnt/data.
  const encoding = (options) => (typeof options === 'string' ? options : options && options.encoding);
  const bytes = (data) => {
    if (typeof data === 'string' || data instanceof Uint8Array) return data;
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    return String(data);
  };
  const flag = (options, name) => !!(options && options[name]);
  const fs = Object.freeze({
    async readFile(path, options) {
      return encoding(options) ? files.readText(String(path)) : files.readBytes(String(path));
    },
    async writeFile(path, data) { files.write(String(path), bytes(data), false); },
    async appendFile(path, data) { files.write(String(path), bytes(data), true); },
    async readdir(path) { return files.readdir(String(path === undefined ? '.' : path)); },
    async mkdir(path, options) { files.mkdir(String(path), flag(options, 'recursive')); },
    async rm(path, options) { files.rm(String(path), flag(options, 'recursive'), flag(options, 'force')); },
    async unlink(path) { files.rm(String(path), false, false); },
    async rename(from, to) { files.rename(String(from), String(to)); },
    async stat(path) {
      const s = files.stat(String(path));
      return { size: s.size, mtimeMs: s.mtimeMs, isFile: () => s.file, isDirectory: () => s.directory };
    },
    async access(path) { files.stat(String(path)); },
  });

  // fetch, shaped like the web's (net.rs makes each request, under the network policy). The
  // whole response is read before it resolves; redirects are followed here, each hop a
  // request the policy checks.
  class Headers {
    #map = new Map();
    constructor(init) {
      if (init instanceof Headers) init.forEach((v, k) => this.append(k, v));
      else if (Array.isArray(init)) for (const [k, v] of init) this.append(k, v);
      else if (init && typeof init === 'object') for (const k of Object.keys(init)) this.append(k, init[k]);
    }
    append(k, v) {
      const key = String(k).toLowerCase();
      const old = this.#map.get(key);
      this.#map.set(key, old === undefined ? String(v) : `${old}, ${v}`);
    }
    set(k, v) { this.#map.set(String(k).toLowerCase(), String(v)); }
    get(k) { const v = this.#map.get(String(k).toLowerCase()); return v === undefined ? null : v; }
    has(k) { return this.#map.has(String(k).toLowerCase()); }
    delete(k) { this.#map.delete(String(k).toLowerCase()); }
    forEach(fn) { for (const [k, v] of this.#map) fn(v, k, this); }
    keys() { return this.#map.keys(); }
    values() { return this.#map.values(); }
    entries() { return this.#map.entries(); }
    [Symbol.iterator]() { return this.#map.entries(); }
  }

  class Response {
    #body;
    constructor(r, url, redirected) {
      this.status = r.status;
      this.statusText = r.reason;
      this.ok = r.status >= 200 && r.status < 300;
      this.headers = new Headers(r.headers);
      this.url = url;
      this.redirected = redirected;
      this.bodyUsed = false;
      this.#body = r.body;
    }
    #take() {
      if (this.bodyUsed) throw new TypeError('Body is unusable: Body has already been read');
      this.bodyUsed = true;
      return this.#body;
    }
    async bytes() { return this.#take(); }
    async arrayBuffer() { return this.#take().slice().buffer; }
    async text() { return net.decode(this.#take()); }
    async json() { return JSON.parse(await this.text()); }
  }

  // `location` against `base` (no URL class in QuickJS).
  const resolve = (base, location) => {
    if (/^[a-z][a-z0-9+.-]*:/i.test(location)) return location;
    const m = /^([a-z][a-z0-9+.-]*:)(\/\/[^/?#]*)?([^?#]*)/i.exec(base);
    if (!m) return location;
    if (location.startsWith('//')) return m[1] + location;
    if (location.startsWith('/')) return m[1] + (m[2] || '') + location;
    return m[1] + (m[2] || '') + m[3].replace(/[^/]*$/, '') + location;
  };

  const fetch = async function fetch(input, init) {
    init = init || {};
    let url = typeof input === 'string' ? input : input && typeof input.url === 'string' ? input.url : String(input);
    let method = String(init.method || 'GET').toUpperCase();
    const headers = new Headers(init.headers);
    let body = init.body === undefined || init.body === null ? undefined : bytes(init.body);
    const follow = (init.redirect || 'follow') === 'follow';
    for (let hop = 0; ; hop++) {
      const r = net.fetch(method, url, [...headers], body, init.timeout);
      const location = new Headers(r.headers).get('location');
      if (!follow || ![301, 302, 303, 307, 308].includes(r.status) || location === null) {
        return new Response(r, url, hop > 0);
      }
      if (hop >= 20) throw new TypeError('fetch failed: more than 20 redirects');
      if (r.status === 303 || ((r.status === 301 || r.status === 302) && method === 'POST')) {
        method = method === 'HEAD' ? 'HEAD' : 'GET';
        body = undefined;
        headers.delete('content-type');
        headers.delete('content-length');
      }
      url = resolve(url, location);
    }
  };

  return { fs, fetch, Headers };
})
