// Preloaded into the platform by bench/alloc.ts (`--import`): V8's sampling heap profiler, keeping
// the objects the garbage collector already took (so it counts what a request allocates, not what
// survives). Imported with `?survivors` it keeps only what outlived a young-generation collection
// instead: what gets copied and promoted, the scavenger's and the old generation's work. The first SIGUSR2 starts sampling, the next writes the profile to
// <tmpdir>/bench-alloc-<pid>.json (the platform's environment is the bench's own, not the caller's).
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Session } from 'node:inspector';

const survivorsOnly = new URL(import.meta.url).searchParams.has('survivors');
const session = new Session();
session.connect();
let sampling = false;
process.on('SIGUSR2', () => {
  if (!sampling) {
    sampling = true;
    session.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMinorGC: !survivorsOnly, includeObjectsCollectedByMajorGC: true });
    return;
  }
  sampling = false;
  session.post('HeapProfiler.stopSampling', (error, result) => {
    if (!error) writeFileSync(join(tmpdir(), `bench-alloc-${process.pid}.json`), JSON.stringify(result.profile));
  });
});
