import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface EdgeProcess {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Starts bench/edge/edge-process.ts under tsx and resolves once it listens. */
export function spawnEdgeProcess(env: Record<string, string>): Promise<EdgeProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/edge/edge-process.ts'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c) => (stderr += c));
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once('line', (line) => {
      const { port } = JSON.parse(line) as { port: number };
      resolve({
        url: `http://127.0.0.1:${port}`,
        child,
        stop: () =>
          new Promise<void>((done) => {
            if (child.exitCode !== null) return done();
            child.once('exit', () => done());
            child.kill('SIGTERM');
          }),
      });
    });
    child.once('exit', (code) => reject(new Error(`edge process exited with ${code}: ${stderr.slice(-2000)}`)));
  });
}
