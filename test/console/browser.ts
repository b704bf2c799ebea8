import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/**
 * The console's browser tests: the console built from its sources, then Debian's Chromium driven by
 * playwright-core with a fresh profile of its own (removed by `close`). Each signed-in user gets a
 * tab of their own (sessionStorage is per tab).
 */
export async function openConsoleBrowser(options: { acceptDownloads?: boolean } = {}): Promise<{ browser: BrowserContext; close(): Promise<void> }> {
  const build = spawnSync(process.execPath, ['scripts/build-console.mjs'], { stdio: 'inherit' });
  if (build.status !== 0) throw new Error('console build failed');
  const userDataDir = mkdtempSync(join(tmpdir(), 'console-chromium-'));
  const browser = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    acceptDownloads: options.acceptDownloads ?? false,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync', '--disable-quic'],
  });
  return {
    browser,
    async close() {
      await browser.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/** A new tab of `browser` signed in to the console at `baseUrl` with an API key. */
export async function signIn(browser: BrowserContext, baseUrl: string, key: string, viewport = { width: 1280, height: 800 }): Promise<Page> {
  const page = await browser.newPage();
  await page.setViewportSize(viewport);
  page.on('pageerror', (error) => console.error('page error:', error.message));
  await page.goto(`${baseUrl}/console/`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  return page;
}
