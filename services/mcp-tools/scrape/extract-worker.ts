import { parentPort } from 'node:worker_threads';
import { extractHtml } from './extract.js';

/** Reads pages sent by extract-thread.ts, one at a time, for as long as the thread is kept. */
parentPort!.on('message', ({ html, url, format }: { html: string; url: string; format: 'text' | 'markdown' }) => {
  try {
    parentPort!.postMessage({ result: extractHtml(html, url, format) });
  } catch (error) {
    parentPort!.postMessage({ error: (error as Error).message });
  }
});
