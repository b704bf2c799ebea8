import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Request, Response } from 'express';
import { ApiError, route } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';

/** The built console (`npm run build` → dist/console), found from the repository root wherever the process started. */
export function consoleDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'dist', 'console');
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * The console's files carry their own policy: scripts and styles only from this origin (no inline
 * script), API calls only to this origin, never framed, no referrer leaving the page, and no
 * handle kept by a page of another origin that opened it (which could otherwise send the
 * signed-in tab to a look-alike sign-in page).
 */
export const CONSOLE_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  // No other origin may embed the console's files (a script of it included by another site), and
  // the page asks for no powerful feature, so none is granted to it or to anything it could load.
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=(), payment=(), usb=(), serial=(), bluetooth=(), hid=(), display-capture=(), clipboard-read=()',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-cache',
};

// Only plain names (letters, digits, dot, dash, underscore, one optional folder level): no `..`,
// no encoded separators, so a request can never leave the folder.
const FILE_NAME = /^(?:[A-Za-z0-9_-]+\/)?[A-Za-z0-9_-]+\.(?:html|js|css|svg)$/;

async function serve(req: Request, res: Response) {
  const path = req.path.replace(/^(?:\/llm)?\/console\/?/, '');
  const name = path === '' ? 'index.html' : path;
  const type = TYPES[name.slice(name.lastIndexOf('.'))];
  res.set(CONSOLE_HEADERS);
  // Refusals are the platform's JSON error body like every other 404 (the kit's error handler writes it).
  if (!FILE_NAME.test(name) || !type) throw new ApiError(404, 'No such console file');
  try {
    const body = await readFile(join(consoleDir(), name));
    res.status(200).type(type).send(req.method === 'HEAD' ? undefined : body);
  } catch {
    throw new ApiError(404, name === 'index.html' ? 'The console has not been built (npm run build)' : 'No such console file');
  }
}

const file = (path: string, summary: string) =>
  route({
    method: 'get',
    path,
    summary,
    access: 'public',
    tag: 'console',
    response: { contentType: 'text/html', description: 'A static file of the web console (HTML, JavaScript or CSS)' },
    handler: async ({ req, res }) => {
      await serve(req, res);
      return undefined;
    },
  });

/**
 * `GET /console/…`: the web console's static files, public at the edge (deck route `llm-api-console`).
 * The console itself calls the public API with the user's own credential (docs/console.md).
 */
export const consoleResource: LlmApiResource = {
  name: 'console',
  migrations: [],
  routes: () => [
    route({
      method: 'get',
      path: '/console',
      summary: 'Redirects to the web console (/console/)',
      access: 'public',
      tag: 'console',
      response: { status: 301, contentType: 'text/plain', description: 'Redirect to /console/' },
      handler: ({ res }) => {
        res.set(CONSOLE_HEADERS).redirect(301, '/console/');
        return undefined;
      },
    }),
    file('/console/', 'The web console (its HTML page)'),
    file('/console/*file', "The web console's scripts and stylesheet"),
  ],
};
