import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import S3rver from 's3rver';

/** A real S3-protocol server (s3rver) on loopback, holding `bucket`, its files in a temporary directory. */
export interface S3Server {
  endpoint: string;
  port: number;
  /** Stops the server and removes its files. */
  close(): Promise<void>;
}

export async function startS3rver(bucket: string): Promise<S3Server> {
  const dir = await mkdtemp(join(tmpdir(), 's3rver-'));
  const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir, configureBuckets: [{ name: bucket }] });
  const { port } = await server.run();
  return {
    endpoint: `http://127.0.0.1:${port}`,
    port,
    async close() {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The settings that point media-api's S3 driver at `endpoint` (s3rver's fixed credentials). */
export const s3rverSettings = (endpoint: string, bucket: string): Record<string, string> => ({
  S3_ENDPOINT: endpoint,
  S3_BUCKET: bucket,
  S3_REGION: 'us-east-1',
  S3_ACCESS_KEY_ID: 'S3RVER',
  S3_SECRET_ACCESS_KEY: 'S3RVER',
  S3_FORCE_PATH_STYLE: 'true',
});
