/** A free TCP port on 127.0.0.1, outside the kernel's ephemeral range (see free-port.mjs). */
export function freePort(): Promise<number>;
/** Where the claims of every process on the machine lie, one file per port naming its owner's pid. */
export const claimsDir: string;
/** True when this process now holds the claim on `port`; false when another (or this) one does. */
export function claimPort(port: number): boolean;
/** True while a process with this pid exists, whoever owns it. */
export function processRunning(pid: number): boolean;
