import test from 'ava';
import { startTestPlatform, type TestPlatform } from './platform.js';

/**
 * One platform for the whole test file: started before its tests, stopped after them however they
 * end. `started` receives it (the file keeps it in its own variable).
 */
export function platformForFile(options: Parameters<typeof startTestPlatform>[0], started: (p: TestPlatform) => void): void {
  let platform: TestPlatform | undefined;
  test.before(async () => {
    platform = await startTestPlatform(options);
    started(platform);
  });
  test.after.always(async () => {
    await platform?.stop();
  });
}
