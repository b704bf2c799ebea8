import { exitMisconfigured, runPhase, type KongPdk, type Needs } from './kong-host.js';
import type { PluginCore } from './types.js';

export const VERSION = '0.1.0';

/**
 * Builds the `Plugin` class kong-js-pluginserver instantiates once per configuration (shared by
 * every request: no per-request state on `this`). `access` is a real class method, so the server
 * detects the phase; there is deliberately no `response` method (it would buffer and break SSE).
 * A configuration the core rejects answers 500 on every request instead of failing open.
 */
export function kongPluginClass(name: string, build: (config: Record<string, unknown>) => PluginCore, needs: Needs) {
  return class Plugin {
    protected readonly name = name;
    private readonly core: PluginCore | null;

    constructor(config: Record<string, unknown>) {
      let core: PluginCore | null = null;
      let failure: string | null = null;
      try {
        core = build(config ?? {});
      } catch (error) {
        failure = (error as Error).message;
        process.stderr.write(`[error] ${name}: invalid configuration: ${failure}\n`);
      }
      this.core = core;
    }

    async access(kong: KongPdk): Promise<void> {
      if (!this.core) {
        return exitMisconfigured(kong, name);
      }
      return runPhase(kong, this.core, needs, name);
    }

    /** For subclasses that also run in Kong's rewrite phase (global plugins only). */
    protected async runRewrite(kong: KongPdk, rewriteNeeds: Needs): Promise<void> {
      if (!this.core) {
        return exitMisconfigured(kong, name);
      }
      if (!this.core.rewrite) return;
      return runPhase(kong, this.core, rewriteNeeds, name, 'rewrite');
    }
  };
}
