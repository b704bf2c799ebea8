import { z } from 'zod';
import { fetchPage, type ScrapeDeps } from '../scrape/fetch-page.js';
import { defineTool } from './tool.js';

const input = z
  .object({
    url: z.string().url().max(4096).describe('The http(s) address of the page to read.'),
    format: z.enum(['text', 'markdown']).default('markdown').describe('"markdown" keeps headings, lists and links; "text" is plain text.'),
    max_chars: z.number().int().min(100).max(1_000_000).optional().describe('Cut the content after this many characters (default 20000).'),
  })
  .strict();

const output = z.object({
  url: z.string(),
  final_url: z.string(),
  title: z.string(),
  content: z.string(),
  truncated: z.boolean(),
});

export function scrapeTool(deps: ScrapeDeps & { defaultMaxChars: number }) {
  return defineTool({
    name: 'scrape',
    title: 'Read a web page',
    description:
      'Fetches a public web page and returns its readable main content (article text without menus, ads ' +
      'and scripts) as Markdown or plain text, with the page title and the final address after redirects. ' +
      'Plain-text resources (JSON, CSV, XML, source files) are returned as they are; binary files are refused. ' +
      'Internal and private network addresses are refused.',
    input,
    output,
    annotations: { readOnlyHint: true, openWorldHint: true, idempotentHint: true },
    async run(ctx, args) {
      const page = await fetchPage(deps, args.url, args.format, args.max_chars ?? deps.defaultMaxChars, ctx.signal, ctx.userId);
      const header = [page.title && `# ${page.title}`, `Source: ${page.final_url}`].filter(Boolean).join('\n');
      return { structured: page, text: `${header}\n\n${page.content}${page.truncated ? '\n\n[content truncated]' : ''}` };
    },
  });
}
