import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApiError, route } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';

/** The generated document (`npm run openapi`), found from the repository root wherever the process started. */
function documentPath(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'docs', 'openapi.json');
}

/**
 * `GET /openapi.json`: the platform's API reference, public at the edge (deck route
 * `llm-api-openapi`). The file is read once, on first use, and served as committed.
 */
export const apiDocsResource: LlmApiResource = {
  name: 'api-docs',
  migrations: [],
  routes() {
    let document: Buffer | null = null;
    return [
      route({
        method: 'get',
        path: '/openapi.json',
        summary: 'The OpenAPI 3.1 document of the whole platform, generated from the route tables',
        access: 'public',
        tag: 'meta',
        response: { contentType: 'application/json', description: 'OpenAPI 3.1 document' },
        handler({ res }) {
          if (!document) {
            const file = documentPath();
            if (!existsSync(file)) throw new ApiError(404, 'The API document has not been generated (npm run openapi)');
            document = readFileSync(file);
          }
          res.set('cache-control', 'public, max-age=300').type('application/json').send(document);
          return undefined;
        },
      }),
    ];
  },
};
