import { setFlagsFromString } from 'node:v8';

/**
 * V8 settings for a process that serves requests, applied when its runtime opens (every service,
 * worker and `npm start` process opens one; setting a flag again changes nothing).
 *
 * `--no-allocation-site-pretenuring`. V8 watches where objects are allocated, and when most objects
 * from one place outlive a young collection it allocates that place's later objects straight in the
 * old generation. A request server allocates almost nothing that lives long, and under steady load
 * about one process in four made such a decision and stayed in a state where whole requests were
 * promoted: 8.4 instead of 1.35 KiB per request, scavenges pausing twice as long, and the event-loop
 * delay under load following them. The likely path: an object placed in the old generation dies
 * there, but keeps the young objects it points to alive through every young collection until the
 * next full one. With the decision off, none of 22 runs entered that state, and the normal state
 * promoted 1.10 instead of 1.35 KiB per request. Figures: bench/README.md, "Twenty-fifth pass".
 */
export function tuneHeapForRequests(): void {
  setFlagsFromString('--no-allocation-site-pretenuring');
}
