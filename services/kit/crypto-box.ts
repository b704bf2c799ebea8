import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ConfigError } from './config.js';

/**
 * A secret box: AES-256-GCM with a random 96-bit nonce per message. Sealed values are strings
 * `v1.<nonce>.<tag>.<ciphertext>` (base64url), so they fit a text column and carry their format
 * version. Used for provider API keys (llm-api) and any other secret stored at rest (webhooks).
 * `aad` binds a sealed value to its owner (e.g. the provider id): moved to another row it fails to open.
 */
export interface SecretBox {
  seal(plaintext: string, aad?: string): string;
  open(sealed: string, aad?: string): string;
}

const VERSION = 'v1';
const TAG_BYTES = 16;

export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error('a secret box needs a 32-byte key');
  return {
    seal(plaintext, aad) {
      const nonce = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, nonce);
      if (aad) cipher.setAAD(Buffer.from(aad, 'utf8'));
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      const tag = cipher.getAuthTag();
      return [VERSION, nonce.toString('base64url'), tag.toString('base64url'), body.toString('base64url')].join('.');
    },
    open(sealed, aad) {
      const parts = sealed.split('.');
      if (parts.length !== 4 || parts[0] !== VERSION) throw new Error('not a sealed value');
      const tag = Buffer.from(parts[2]!, 'base64url');
      // GCM would accept a tag cut to 4 bytes, which a forger can guess: only the full 16 open.
      if (tag.length !== TAG_BYTES) throw new Error('not a sealed value');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(parts[1]!, 'base64url'), { authTagLength: TAG_BYTES });
      if (aad) decipher.setAAD(Buffer.from(aad, 'utf8'));
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(Buffer.from(parts[3]!, 'base64url')), decipher.final()]).toString('utf8');
    },
  };
}

/** Parses `MASTER_KEY`: 64 hex characters or base64/base64url of exactly 32 bytes. */
export function parseMasterKey(value: string): Buffer {
  const trimmed = value.trim();
  if (/^[0-9a-fA-F]{64}$/.test(trimmed)) return Buffer.from(trimmed, 'hex');
  const decoded = Buffer.from(trimmed, trimmed.includes('+') || trimmed.includes('/') ? 'base64' : 'base64url');
  if (decoded.length !== 32) throw new ConfigError('MASTER_KEY', 'must be 32 bytes as 64 hex characters or base64');
  return decoded;
}

/**
 * The master key of this installation: `MASTER_KEY` when set; otherwise the embedded default, a
 * random key generated once and kept in `<DATA_DIR>/master.key` (mode 0600), so sealed values
 * survive restarts. Production sets MASTER_KEY (the same value on every replica).
 */
export function loadMasterKey(config: { MASTER_KEY?: string; DATA_DIR: string }): Buffer {
  if (config.MASTER_KEY) return parseMasterKey(config.MASTER_KEY);
  const file = resolve(config.DATA_DIR, 'master.key');
  if (existsSync(file)) return parseMasterKey(readFileSync(file, 'utf8'));
  mkdirSync(dirname(file), { recursive: true });
  const key = randomBytes(32);
  try {
    writeFileSync(file, `${key.toString('hex')}\n`, { flag: 'wx', mode: 0o600 });
  } catch (error) {
    // Another process created it first: use theirs.
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return parseMasterKey(readFileSync(file, 'utf8'));
    throw error;
  }
  chmodSync(file, 0o600);
  return key;
}
