// Preloaded into the platform by bench/alloc.ts (`--import`): V8's sampling heap profiler, keeping
// the objects the garbage collector already took (so it counts what a request allocates, not what
// survives). The first SIGUSR2 starts sampling, the next writes the profile to
// <tmpdir>/bench-alloc-<pid>.json (the platform's environment is the bench's own, not the caller's).
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Session } from 'node:inspector';

const session = new Session();
session.connect();
let sampling = false;
process.on('SIGUSR2', () => {
  if (!sampling) {
    sampling = true;
    session.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMinorGC: true, includeObjectsCollectedByMajorGC: true });
    return;
  }
  sampling = false;
  session.post('HeapProfiler.stopSampling', (error, result) => {
    if (!error) writeFileSync(join(tmpdir(), `bench-alloc-${process.pid}.json`), JSON.stringify(result.profile));
  });
});
