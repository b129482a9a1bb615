// The guest's own JavaScript, evaluated once per runtime as `ptc:runtime` (its frames are
// left out of the program's stacks). It is called with the host's functions (a call, the
// clock, and what makes `extras.js`) and returns what the Rust side drives: the timers and
// the tools. Nothing of it is a global but what a
// program uses: setTimeout, setInterval and their clears, ToolError, fs, fetch with Headers,
// process.env and the tools.
(function (call, now, extras) {
  'use strict';
  let seq = 0;
  const timers = new Map();
  globalThis.setTimeout = (fn, ms, ...args) => {
    const id = ++seq;
    timers.set(id, { due: now() + Math.max(0, +ms || 0), fn, args });
    return id;
  };
  globalThis.clearTimeout = (id) => { timers.delete(id); };
  // An interval is a timer set again each time it fires (never more often than every 1 ms).
  globalThis.setInterval = (fn, ms, ...args) => {
    const id = ++seq;
    const every = Math.max(1, +ms || 0);
    timers.set(id, { due: now() + every, fn, args, every });
    return id;
  };
  globalThis.clearInterval = globalThis.clearTimeout;

  class ToolError extends Error {
    constructor(message, tool) {
      super(message);
      this.name = 'ToolError';
      this.tool = tool;
    }
  }
  globalThis.ToolError = ToolError;

  // The program's frames of a stack (the runtime's are not the program's doing).
  const own = (stack) => String(stack || '').split('\n').filter((l) => l && !l.includes('ptc:runtime')).join('\n');

  // A tool: a function of one object (its JSON arguments) returning a promise of the result.
  // A failure rejects with a ToolError whose stack is where the program called the tool.
  const tool = (namespace, name) => function (args) {
    const site = new Error();
    return call(namespace, name, JSON.stringify(args === undefined ? {} : args)).then(JSON.parse, (message) => {
      const e = new ToolError(message, name);
      e.stack = own(site.stack) + '\n';
      throw e;
    });
  };

  // fs, fetch and Headers are made at their first use (`extras.js`): evaluating them in
  // every fresh runtime cost about as much as the rest of a fresh `1+1` (0.9 ms of 1.3).
  let made;
  const extra = (name) => {
    made = made || extras();
    return made[name];
  };
  for (const name of ['fs', 'fetch', 'Headers']) {
    Object.defineProperty(globalThis, name, {
      configurable: true,
      get() {
        const value = extra(name);
        Object.defineProperty(globalThis, name, { value, writable: true, configurable: true });
        return value;
      },
      set(value) {
        Object.defineProperty(globalThis, name, { value, writable: true, configurable: true });
      },
    });
  }

  let installed = [];
  // The objects made for tool namespaces.
  const spaces = new WeakSet();
  return {
    // When the nearest timer is due (`now()`'s milliseconds), or -1.
    next() {
      let due = -1;
      for (const t of timers.values()) if (due < 0 || t.due < due) due = t.due;
      return due;
    },
    // Runs the timers that are due; a callback's throw ends the program.
    fire() {
      const t0 = now();
      for (const [id, t] of [...timers]) {
        if (t.due <= t0) {
          if (t.every) t.due = t0 + t.every;
          else timers.delete(id);
          if (typeof t.fn === 'function') t.fn(...t.args);
        }
      }
    },
    // The execution's environment (a secret's placeholder for its name) as process.env.
    env(pairs) {
      globalThis.process = Object.freeze({ env: Object.freeze(Object.fromEntries(pairs)) });
    },
    // The program's tools, in place of the last program's: [[jsNamespace, jsName, namespace, name]].
    // A tool's name wins over a global of the runtime's (a server named `fs`, a tool named
    // `fetch`): the program calls what its tool list names.
    tools(list) {
      const define = (name, value) =>
        Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
      for (const [ns, n] of installed) {
        if (!ns) delete globalThis[n];
        else if (spaces.has(globalThis[ns])) delete globalThis[ns][n];
      }
      for (const [ns, n, namespace, name] of list) {
        const f = tool(namespace, name);
        if (!ns) {
          define(n, f);
        } else {
          if (!spaces.has(globalThis[ns])) {
            const space = {};
            spaces.add(space);
            define(ns, space);
          }
          globalThis[ns][n] = f;
        }
      }
      installed = list;
    },
  };
})
