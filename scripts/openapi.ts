// `npm run openapi`: writes docs/openapi.json and docs/api.md from the services' route tables.
import { writeFileSync } from 'node:fs';
import { generatedApiDocs } from '../services/platform/openapi.js';

for (const [file, content] of Object.entries(generatedApiDocs())) {
  writeFileSync(file, content);
  console.log(`wrote ${file} (${content.length} bytes)`);
}
