import type { EgressGuard } from '../../kit/index.js';
import type { FileSearch } from '../file-search/file-search.js';
import type { SandboxDriver } from '../sandbox/index.js';
import type { SearchBackend } from '../search/index.js';
import { fileSearchIndexTool } from './file-search-index.js';
import { fileSearchQueryTool } from './file-search-query.js';
import { googleSearchTool } from './google-search.js';
import { pythonExecTool } from './python-exec.js';
import { scrapeTool } from './scrape.js';
import type { McpTool } from './tool.js';

export interface ToolsDeps {
  search: SearchBackend | null;
  scrape: { egress: EgressGuard; timeoutMs: number; maxBytes: number; defaultMaxChars: number };
  fileSearch: FileSearch;
  fileSearchMaxChars: number;
  sandbox: SandboxDriver;
}

/** The five tools, in the order `tools/list` shows them. Their names are a public contract: never rename one. */
export function buildTools(deps: ToolsDeps): McpTool[] {
  return [
    googleSearchTool({ search: deps.search }),
    scrapeTool(deps.scrape),
    fileSearchIndexTool({ fileSearch: deps.fileSearch, maxChars: deps.fileSearchMaxChars }),
    fileSearchQueryTool({ fileSearch: deps.fileSearch }),
    pythonExecTool({ sandbox: deps.sandbox }),
  ];
}
