import { kongPluginClass, VERSION } from '../core/index.js';
import { processLogger } from '../core/index.js';
import { createJwtAuth, PRIORITY } from './core.js';
import { parseJwtAuthConfig, Schema } from './schema.js';

export const Name = 'jwt-auth';
export const Version = VERSION;
export const Priority = PRIORITY;
export { Schema };
export const Plugin = kongPluginClass(Name, parseJwtAuthConfig, (config) => createJwtAuth(config, { logger: processLogger }), { headers: true, method: true });
