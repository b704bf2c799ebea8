import { Readability } from '@mozilla/readability';
import { parseHTML } from 'linkedom';
import TurndownService from 'turndown';

/**
 * The readable part of an HTML page: Mozilla's Readability on a linkedom DOM (no script runs,
 * nothing is fetched), converted to Markdown with Turndown or to plain text. Pages Readability
 * does not recognise as articles fall back to the body with scripts, styles and navigation removed.
 */
export interface Extracted {
  title: string;
  content: string;
}

export function extractHtml(html: string, url: string, format: 'text' | 'markdown'): Extracted {
  const { document } = parseHTML(html);
  const pageTitle = (document.querySelector('title')?.textContent ?? '').trim();
  let article: { title?: string | null; content?: string | null; textContent?: string | null } | null = null;
  try {
    // Readability mutates the document; parse a fresh copy for it.
    article = new Readability(parseHTML(html).document as unknown as ConstructorParameters<typeof Readability>[0], { charThreshold: 200 }).parse();
  } catch {
    article = null;
  }
  const title = (article?.title ?? '').trim() || pageTitle;
  if (article?.content) {
    const content = format === 'markdown' ? toMarkdown(article.content, url) : normaliseText(article.textContent ?? '');
    if (content.trim()) return { title, content };
  }
  for (const node of document.querySelectorAll('script, style, noscript, template, nav, header, footer, svg, iframe')) node.remove();
  const body = document.querySelector('body') ?? document.documentElement;
  const content = format === 'markdown' ? toMarkdown(body?.innerHTML ?? '', url) : normaliseText(body?.textContent ?? '');
  return { title, content };
}

function toMarkdown(html: string, baseUrl: string): string {
  const turndown = new TurndownService({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' });
  turndown.remove(['script', 'style', 'noscript', 'iframe']);
  // Relative links would be useless to the caller: make them absolute against the page address.
  turndown.addRule('absoluteLinks', {
    filter: (node) => node.nodeName === 'A' && !!node.getAttribute('href'),
    replacement: (content, node) => {
      const href = absolute((node as { getAttribute(name: string): string | null }).getAttribute('href')!, baseUrl);
      return href ? `[${content}](${href})` : content;
    },
  });
  // An image keeps its alt text; its address only when it is a web address (made absolute): not a
  // javascript: one, nor a data: URL that would fill the content with base64.
  turndown.addRule('webImages', {
    filter: 'img',
    replacement: (_content, node) => {
      const element = node as { getAttribute(name: string): string | null };
      const alt = (element.getAttribute('alt') ?? '').replace(/[\[\]\\]/g, '\\$&').replace(/\s+/g, ' ').trim();
      const src = webAddress(element.getAttribute('src') ?? '', baseUrl);
      return src ? `![${alt}](${src})` : alt;
    },
  });
  return turndown.turndown(html).replace(/\n{3,}/g, '\n\n').trim();
}

function absolute(href: string, base: string): string | null {
  try {
    const url = new URL(href, base);
    return url.protocol === 'http:' || url.protocol === 'https:' || url.protocol === 'mailto:' ? url.toString() : null;
  } catch {
    return null;
  }
}

function webAddress(src: string, base: string): string | null {
  if (!src.trim()) return null;
  const url = absolute(src, base);
  return url && !url.startsWith('mailto:') ? url : null;
}

export function normaliseText(text: string): string {
  return text
    .replace(/\r\n?/g, '\n')
    .split('\n')
    .map((line) => line.replace(/[ \t\u00a0]+/g, ' ').trim())
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}
