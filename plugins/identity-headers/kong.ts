import { kongPluginClass, VERSION } from '../core/index.js';
import { createIdentityHeaders, PRIORITY } from './core.js';
import { parseIdentityHeadersConfig, Schema } from './schema.js';

export const Name = 'identity-headers';
export const Version = VERSION;
export const Priority = PRIORITY;
export { Schema };
export const Plugin = kongPluginClass(Name, parseIdentityHeadersConfig, createIdentityHeaders, { headers: true });
