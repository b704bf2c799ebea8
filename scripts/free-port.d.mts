/** A free TCP port on 127.0.0.1, outside the kernel's ephemeral range (see free-port.mjs). */
export function freePort(): Promise<number>;
