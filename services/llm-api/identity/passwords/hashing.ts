import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/**
 * Password hashes: scrypt (node:crypto) with a random 16-byte salt per password. The encoded form
 * carries its own parameters, `scrypt$ln=15,r=8,p=1$<salt base64>$<hash base64>`, so the cost can
 * be raised later without breaking stored hashes. Comparison is constant-time.
 */
export const SCRYPT_PARAMS = { ln: 15, r: 8, p: 1 } as const;
const KEY_LENGTH = 32;
const SALT_LENGTH = 16;
/** Parameters read from a stored hash are bounded, so a corrupted row cannot make one check take minutes. */
const MAX_LN = 20;
const ENCODED = /^scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/;

function derive(password: string, salt: Buffer, params: { ln: number; r: number; p: number }, length: number): Promise<Buffer> {
  const N = 2 ** params.ln;
  // scrypt needs 128·N·r·p bytes; node's default cap (32 MiB) is exactly that for ln=15, r=8.
  const options: ScryptOptions = { N, r: params.r, p: params.p, maxmem: 256 * N * params.r * params.p };
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFKC'), salt, length, options, (error, key) => (error ? reject(error) : resolve(key))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_LENGTH);
  const key = await derive(password, salt, SCRYPT_PARAMS, KEY_LENGTH);
  const { ln, r, p } = SCRYPT_PARAMS;
  return `scrypt$ln=${ln},r=${r},p=${p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

/** True when `password` matches `encoded`; false for a mismatch or an unreadable hash. */
export async function verifyPassword(password: string, encoded: string): Promise<boolean> {
  const match = ENCODED.exec(encoded);
  if (!match) return false;
  const [ln, r, p] = [Number(match[1]), Number(match[2]), Number(match[3])];
  if (ln < 1 || ln > MAX_LN || r < 1 || r > 32 || p < 1 || p > 16) return false;
  const salt = Buffer.from(match[4]!, 'base64');
  const expected = Buffer.from(match[5]!, 'base64');
  if (expected.length < 16) return false;
  const actual = await derive(password, salt, { ln, r, p }, expected.length);
  return timingSafeEqual(actual, expected);
}

/**
 * A hash of a random password nobody knows, made once: checking against it costs exactly what a
 * real check costs, so an unknown e-mail (or an account without a password) answers in the same time.
 */
let decoy: Promise<string> | null = null;
export function decoyHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(32).toString('base64'));
  return decoy;
}
