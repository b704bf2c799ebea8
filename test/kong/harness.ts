import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { decodeMultiStream, encode } from '@msgpack/msgpack';
import { waitFor } from '../helpers/wait.js';

/**
 * Acts as Kong towards the real `kong-js-pluginserver` (kong-pdk 0.6.0): MessagePack-RPC over its
 * Unix socket, `[0, msgid, "plugin.<Method>", [arg]]` → `[1, msgid, error, result]`, one request in
 * flight per connection, and the per-phase HandleEvent/Step loop backed by a scripted fake PDK
 * that reproduces Kong's semantics (../shared/reference/kong-plugin-server.md §3):
 *  - request/response header getters return a multimap (name → array of strings); the request's
 *    getters read only its first 100 header lines, or `max_headers` (at most 1000);
 *  - raw bodies travel as bytes (msgpack bin → Uint8Array);
 *  - only the first Lua return value crosses; nil means the `Data` key is absent;
 *  - `kong.response.exit/error` are never answered (Kong never sends another Step);
 *  - a call Lua rejects (wrong phase, bad arguments) turns the request into a 500;
 *  - unknown PDK methods are logged by Kong and answered with nil;
 *  - `kong.ctx.shared` is a Lua table: a nil (JavaScript null or undefined) is not kept, so a null
 *    field reads back absent, a table left without keys reads back as an empty array, and a list
 *    with a nil hole as a map keyed by position (`throughLuaTable`);
 *  - an instance's configuration carries the keys Kong's plugins iterator adds (`kongConfig`).
 */
export const PLUGIN_SERVER = resolve('node_modules/kong-pdk/bin/kong-js-pluginserver');

export function buildPluginsInto(dir: string): void {
  const out = spawnSync(process.execPath, [resolve('kong/build.mjs'), dir], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`kong/build.mjs failed: ${out.stderr}`);
}

export function dumpAllPlugins(pluginDir: string): { stdout: string; status: number | null } {
  const out = spawnSync(process.execPath, [PLUGIN_SERVER, '-d', pluginDir, '--dump-all-plugins'], { encoding: 'utf8' });
  return { stdout: out.stdout, status: out.status };
}

class RpcConnection {
  private msgid = 0;
  private pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private queue: Promise<unknown> = Promise.resolve();
  calls = 0;

  private constructor(private readonly socket: net.Socket) {
    void (async () => {
      try {
        for await (const message of decodeMultiStream(socket)) {
          const [type, id, error, result] = message as [number, number, unknown, unknown];
          if (type !== 1) continue;
          const waiter = this.pending.get(id);
          this.pending.delete(id);
          if (!waiter) continue;
          if (error !== null && error !== undefined) waiter.reject(new Error(String(error)));
          else waiter.resolve(result);
        }
      } catch {
        // socket closed
      }
    })();
  }

  static open(path: string): Promise<RpcConnection> {
    return new Promise((resolvePromise, reject) => {
      const socket = net.connect(path, () => resolvePromise(new RpcConnection(socket)));
      socket.once('error', reject);
    });
  }

  /** One call at a time, as Kong does on a pooled connection. */
  call(method: string, arg: unknown): Promise<any> {
    const run = () =>
      new Promise((resolvePromise, reject) => {
        const id = ++this.msgid;
        this.calls++;
        this.pending.set(id, { resolve: resolvePromise, reject });
        this.socket.write(encode([0, id, `plugin.${method}`, [arg]], { ignoreUndefined: true }));
      });
    const next = this.queue.then(run, run);
    this.queue = next.catch(() => {});
    return next;
  }

  close() {
    this.socket.destroy();
  }
}

export interface FakeRequest {
  method?: string;
  path?: string;
  headers?: Record<string, string | string[]>;
  rawBody?: Uint8Array | null;
  forwardedIp?: string;
  /** PDK methods whose call Kong answers with StepError (the JS side then throws). */
  stepErrors?: string[];
  /** Methods Lua would reject: the request becomes a 500. */
  luaErrors?: string[];
}

export interface PhaseResult {
  /** Status Kong would send: the exit status, 500 after a Lua error, or null when proxied. */
  status: number | null;
  exit?: { status: number; body: unknown; headers?: Record<string, unknown> };
  /** Headers of the request as it would go upstream (lower-case names). */
  upstreamHeaders: Record<string, string[]>;
  responseHeaders: Record<string, string>;
  shared: Record<string, unknown>;
  authenticated: { consumer: unknown; credential: unknown } | null;
  calls: string[];
  logs: string[];
}

const LOG_PHASE_ALLOWED = new Set([
  'kong.log.serialize',
  'kong.request.get_header',
  'kong.request.get_headers',
  'kong.response.get_status',
  'kong.response.get_header',
  'kong.response.get_headers',
  'kong.response.get_source',
  'kong.ctx.shared.get',
  'kong.ctx.shared.set',
  'kong.nginx.get_ctx',
  'kong.nginx.set_ctx',
  'kong.nginx.req_start_time',
  'kong.nginx.get_var',
  'kong.request.get_uri_captures',
]);

/** Kong's `fix_mmap`: every header value becomes an array of strings. */
function multimap(headers: Record<string, string | string[]>): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(headers)) out[k.toLowerCase()] = Array.isArray(v) ? [...v] : [v];
  return out;
}

class LuaError extends Error {}

/**
 * A value as it comes back from a Lua table it was stored in (msgpack → Lua → msgpack):
 * lua-MessagePack unpacks nil into the table as no entry at all, so a null or undefined field is
 * gone; a table packs as an array when its keys are exactly 1..n (so `[]` for a table left without
 * keys), else as a map (a list with a null hole reads back keyed by position: lua-MessagePack's
 * default `without_hole`); bytes come back as a string. `undefined` means "absent".
 */
export function throughLuaTable(value: unknown): unknown {
  if (value === null || value === undefined) return undefined;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  if (Array.isArray(value)) {
    const kept = value.map(throughLuaTable);
    let count = 0;
    let max = 0;
    kept.forEach((item, i) => {
      if (item === undefined) return;
      count++;
      max = i + 1;
    });
    if (max === count) return kept.slice(0, max);
    const map: Record<string, unknown> = {};
    kept.forEach((item, i) => {
      if (item !== undefined) map[String(i + 1)] = item;
    });
    return map;
  }
  if (typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(value)) {
      const kept = throughLuaTable(field);
      if (kept !== undefined) out[key] = kept;
    }
    return Object.keys(out).length > 0 ? out : [];
  }
  return value;
}

/** `kong.ctx.shared[key] = value` (a nil value removes the entry). */
function storeShared(shared: Record<string, unknown>, key: string, value: unknown): void {
  const kept = throughLuaTable(value);
  if (kept === undefined) delete shared[key];
  else shared[key] = kept;
}

/** `get_headers(max_headers)`'s argument as Kong checks it: 100 when absent, a number from 1 to 1000. */
function maxHeaders(arg: unknown): number {
  if (arg === undefined || arg === null) return 100;
  if (typeof arg !== 'number') throw new LuaError('max_headers must be a number');
  if (arg < 1) throw new LuaError('max_headers must be >= 1');
  if (arg > 1000) throw new LuaError('max_headers must be <= 1000');
  return arg;
}

/**
 * `ngx.req.get_headers(max)`: the first `max` header lines in the order sent (each value of a
 * repeated header is a line); the rest are dropped, and the "truncated" it also returns never
 * crosses to the plugin server.
 */
function firstLines(headers: Record<string, string[]>, max: number): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  let lines = 0;
  for (const [name, values] of Object.entries(headers)) {
    for (const value of values) {
      if (lines++ >= max) return out;
      (out[name] ??= []).push(value);
    }
  }
  return out;
}

export class FakeKong {
  readonly consumers = new Map<string, Record<string, unknown>>([['anonymous', { id: 'c0ffee00-0000-4000-8000-000000000001', username: 'anonymous' }]]);

  /** Runs one request's `phase` of a plugin instance, answering its PDK calls like Kong. */
  async run(rpc: RpcConnection, instanceId: number, request: FakeRequest, phase = 'access', shared: Record<string, unknown> = {}): Promise<PhaseResult> {
    const upstream = multimap(request.headers ?? {});
    // What the caller put in the context stands for what earlier plugins stored there: a Lua table.
    for (const key of Object.keys(shared)) storeShared(shared, key, shared[key]);
    const result: PhaseResult = { status: null, upstreamHeaders: upstream, responseHeaders: {}, shared, authenticated: null, calls: [], logs: [] };
    let event = await rpc.call('HandleEvent', { InstanceId: instanceId, EventName: phase });
    while (event.Data !== 'ret') {
      const { Method: method, Args: args = [] } = event.Data as { Method: string; Args: unknown[] };
      result.calls.push(method);
      if (method === 'kong.response.exit' || method === 'kong.response.error') {
        const [status, body, headers] = args as [number, unknown, Record<string, unknown>?];
        result.exit = { status, body, headers };
        result.status = status;
        return result; // Kong calls ngx.exit: no further Step for this event
      }
      if (request.stepErrors?.includes(method)) {
        event = await rpc.call('StepError', { EventId: event.EventId, Data: `${method} failed` });
        continue;
      }
      let value: unknown;
      try {
        if (phase === 'log' && !LOG_PHASE_ALLOWED.has(method)) throw new LuaError(`${method} is not allowed in the log phase`);
        if (request.luaErrors?.includes(method)) throw new LuaError(`${method}: Lua error`);
        value = this.pdk(method, args, request, result);
      } catch (error) {
        if (error instanceof LuaError) {
          result.status = 500;
          result.logs.push(`[kong] ${error.message}`);
          return result;
        }
        throw error;
      }
      const step: Record<string, unknown> = { EventId: event.EventId };
      if (value !== undefined && value !== null) step.Data = value;
      event = await rpc.call('Step', step);
    }
    return result;
  }

  private pdk(method: string, args: unknown[], request: FakeRequest, result: PhaseResult): unknown {
    const str = (i: number) => {
      if (typeof args[i] !== 'string') throw new LuaError(`${method}: argument #${i + 1} must be a string`);
      return (args[i] as string).toLowerCase();
    };
    const headers = multimap(request.headers ?? {});
    switch (method) {
      case 'kong.request.get_headers':
        return firstLines(headers, maxHeaders(args[0]));
      case 'kong.request.get_header':
        return firstLines(headers, 100)[str(0)]?.[0];
      case 'kong.request.get_method':
        return request.method ?? 'GET';
      case 'kong.request.get_path':
        return request.path ?? '/';
      case 'kong.request.get_raw_body':
        return request.rawBody ?? undefined;
      case 'kong.client.get_forwarded_ip':
      case 'kong.client.get_ip':
        return request.forwardedIp ?? '127.0.0.1';
      case 'kong.client.load_consumer':
        return this.consumers.get(String(args[0]));
      case 'kong.client.authenticate':
        if ((args[0] === null || args[0] === undefined) && (args[1] === null || args[1] === undefined)) {
          throw new LuaError('either credential or consumer must be provided');
        }
        result.authenticated = { consumer: args[0] ?? null, credential: args[1] ?? null };
        return undefined;
      case 'kong.client.get_credential':
        return result.authenticated?.credential ?? undefined;
      case 'kong.ctx.shared.get':
        return result.shared[String(args[0])];
      case 'kong.ctx.shared.set':
        storeShared(result.shared, String(args[0]), args[1]);
        return undefined;
      case 'kong.service.request.set_header':
        result.upstreamHeaders[str(0)] = [String(args[1])];
        return undefined;
      case 'kong.service.request.set_headers':
        for (const [k, v] of Object.entries(args[0] as Record<string, unknown>)) result.upstreamHeaders[k.toLowerCase()] = Array.isArray(v) ? v.map(String) : [String(v)];
        return undefined;
      case 'kong.service.request.clear_header':
        delete result.upstreamHeaders[str(0)];
        return undefined;
      case 'kong.response.set_header':
        result.responseHeaders[String(args[0])] = String(args[1]);
        return undefined;
      case 'kong.response.set_headers':
        for (const [k, v] of Object.entries(args[0] as Record<string, unknown>)) result.responseHeaders[k] = String(v);
        return undefined;
      default:
        if (method.startsWith('kong.log.')) {
          result.logs.push(`${method} ${args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ')}`);
          return undefined;
        }
        result.logs.push(`[kong] could not find pdk method: ${method}`);
        return undefined;
    }
  }
}

/** The `ws_id` of Kong's default workspace (a UUID Kong draws when it creates its database). */
export const DEFAULT_WORKSPACE_ID = '0dc6f45b-8f8d-40d2-a504-473544ee190b';

/** Kong's DAO `remove_nulls`: every null field is gone, at any depth (empty tables stay as they are). */
function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.filter((item) => item !== null && item !== undefined).map(withoutNulls);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(value)) if (field !== null && field !== undefined) out[key] = withoutNulls(field);
    return out;
  }
  return value;
}

/**
 * Where a plugin is configured (decK: `plugins:` at the top for a global plugin, or under a route,
 * a service, a consumer, a consumer group), with the plugin entity's optional `instance_name` and
 * `ordering` and its `id` (one entity started by several nginx workers keeps its id).
 */
export interface KongScope {
  route?: string;
  service?: string;
  consumer?: string;
  consumerGroup?: string;
  instanceName?: string;
  ordering?: Record<string, unknown>;
  pluginId?: string;
}

/** A plugin configured at the top level of the decK file (the rate limiter, identity-headers). */
export const GLOBAL: KongScope = {};

/** The harness's default: a plugin on a service, named (decK `instance_name`), as the auth plugins are. */
export const SERVICE_SCOPED: KongScope = { service: '5e1f1c8a-0000-4000-8000-00000000000b', instanceName: 'llm-api-plugin' };

/**
 * The configuration `plugin.StartInstance` carries, as Kong 3.x builds it (`get_plugin_config` in
 * kong/runloop/plugins_iterator.lua): the entity's `config` read from the database or the
 * declarative file with its nulls removed (Kong's DAO drops null fields unless asked for them), to
 * which the iterator adds `ordering`, `route_id`, `service_id`, `consumer_id`, `consumer_group_id`,
 * `plugin_instance_name` (each only when the entity has it: a Lua nil is no key at all in the
 * JSON), `__plugin_id`, `__key__` (the entity's cache key, `plugins:<name>:<route>:<service>:
 * <consumer>:<consumer group>:<workspace>`) and `__seq__` (a counter shared by the workers).
 */
export function kongConfig(name: string, config: Record<string, unknown>, scope: KongScope, seq: number): Record<string, unknown> {
  const conf = withoutNulls(config) as Record<string, unknown>;
  const added: Record<string, unknown> = {
    ordering: scope.ordering,
    route_id: scope.route,
    service_id: scope.service,
    consumer_id: scope.consumer,
    consumer_group_id: scope.consumerGroup,
    plugin_instance_name: scope.instanceName,
    __plugin_id: scope.pluginId ?? `00000000-0000-4000-8000-${String(seq).padStart(12, '0')}`,
  };
  for (const [key, value] of Object.entries(added)) if (value !== undefined) conf[key] = value;
  const scopeIds = [scope.route, scope.service, scope.consumer, scope.consumerGroup].map((id) => id ?? '');
  conf.__key__ = ['plugins', name, ...scopeIds, DEFAULT_WORKSPACE_ID].join(':');
  conf.__seq__ = seq;
  return conf;
}

/**
 * A running plugin server for one plugin directory, plus a connection speaking Kong's side.
 * `clockOffsetMs` moves the server's clock (./clock-offset.mjs, preloaded): give it the offset of
 * the test's `offsetClock` so both hosts count in the same windows.
 */
export async function startPluginServer(pluginDir: string, options: { clockOffsetMs?: number } = {}) {
  const prefix = mkdtempSync(join(tmpdir(), 'kong-ps-'));
  const sockName = 'plugin.sock';
  const socketPath = join(prefix, sockName);
  const preload: string[] = [];
  if (options.clockOffsetMs !== undefined) {
    const clockOffset = new URL('./clock-offset.mjs', import.meta.url);
    clockOffset.searchParams.set('ms', String(options.clockOffsetMs));
    preload.push('--import', clockOffset.href);
  }
  const child: ChildProcess = spawn(process.execPath, [...preload, PLUGIN_SERVER, '-d', pluginDir, '-p', `${prefix}/`, '--sock-name', sockName], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c) => (output += c));
  child.stderr!.on('data', (c) => (output += c));
  // The server announces nothing on stdout without -v, and its socket file appears at bind(), a
  // moment before listen(): wait (bounded) until a connect succeeds, and stop early if it exits.
  let lastError = 'no socket file yet';
  const rpc = await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`plugin server exited: ${output}`);
      if (!existsSync(socketPath)) return undefined;
      return RpcConnection.open(socketPath).catch((error: Error) => {
        lastError = error.message;
        return undefined;
      });
    },
    30_000,
    'a connection to the plugin server',
  ).catch((error: Error) => {
    throw new Error(`cannot connect to the plugin server: ${error.message} (${lastError}) ${output}`);
  });
  const kong = new FakeKong();
  let seq = 0;
  return {
    rpc,
    kong,
    output: () => output,
    /**
     * plugin.StartInstance with the conf table Kong would send (`kongConfig`: the keys Kong adds
     * included), for a plugin configured at `scope` (by default on a service, named).
     */
    async start(name: string, config: Record<string, unknown>, scope: KongScope = SERVICE_SCOPED): Promise<number> {
      const conf = JSON.stringify(kongConfig(name, config, scope, ++seq));
      const started = (await rpc.call('StartInstance', { Name: name, Config: conf })) as { Id: number; Name: string };
      return started.Id;
    },
    run: (instanceId: number, request: FakeRequest, shared?: Record<string, unknown>, phase?: string) => kong.run(rpc, instanceId, request, phase, shared),
    async stop() {
      rpc.close();
      await new Promise<void>((done) => {
        if (child.exitCode !== null) return done();
        child.once('exit', () => done());
        child.kill('SIGTERM');
      });
      rmSync(prefix, { recursive: true, force: true });
    },
  };
}

export type PluginServer = Awaited<ReturnType<typeof startPluginServer>>;

/**
 * The compiled plugins, built into a temporary directory, each in a plugin server of its own;
 * tiered-rate-limit's clock moved by `clockOffsetMs` (see `startPluginServer`). `stop` ends them
 * all and removes the directory.
 */
export async function startPluginServers(names: readonly string[], options: { clockOffsetMs?: number } = {}) {
  const dist = mkdtempSync(join(tmpdir(), 'kong-dist-'));
  const servers = new Map<string, PluginServer>();
  try {
    buildPluginsInto(dist);
    await Promise.all(names.map(async (name) => servers.set(name, await startPluginServer(join(dist, name), name === 'tiered-rate-limit' ? options : {}))));
  } catch (error) {
    await Promise.all([...servers.values()].map((s) => s.stop()));
    rmSync(dist, { recursive: true, force: true });
    throw error;
  }
  return {
    dist,
    server: (name: string) => servers.get(name)!,
    async stop() {
      await Promise.all([...servers.values()].map((s) => s.stop()));
      rmSync(dist, { recursive: true, force: true });
    },
  };
}
