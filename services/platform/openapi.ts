import { readFileSync } from 'node:fs';
import { apiMarkdown, openApiDocument, type DocumentedService } from '../kit/index.js';
import { services } from './registry.js';

/**
 * The platform's API document, generated from every service's route table (built without starting
 * anything). `npm run openapi` writes the two files; a test fails when the committed ones are stale;
 * the edge serves docs/openapi.json at `/openapi.json`.
 */
export const OPENAPI_FILE = 'docs/openapi.json';
export const API_MD_FILE = 'docs/api.md';

export function documentedServices(): DocumentedService[] {
  return services.flatMap((def) => (def.routeTable ? [{ name: def.name, routes: def.routeTable(), aliases: def.aliases }] : []));
}

export function platformOpenApi(): Record<string, unknown> {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string; description: string };
  return openApiDocument(
    {
      title: 'AI gateway platform',
      version: pkg.version,
      description: `${pkg.description} Every \`/v1/...\` path is also served under \`/llm/v1/...\`. Errors have one shape: \`{"error":{"type","code","message","param","request_id"}}\`.`,
    },
    documentedServices(),
  );
}

/** The generated files, by path, exactly as they are committed. */
export function generatedApiDocs(): Record<string, string> {
  const services = documentedServices();
  return {
    [OPENAPI_FILE]: `${JSON.stringify(platformOpenApi(), null, 2)}\n`,
    [API_MD_FILE]: apiMarkdown(services),
  };
}
