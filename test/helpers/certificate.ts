import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A key and a self-signed certificate for 127.0.0.1, as PEM files in a directory of their own. */
export interface LoopbackCertificate {
  keyFile: string;
  /** The certificate, also what a calling process trusts through NODE_EXTRA_CA_CERTS. */
  certFile: string;
  /** Removes both files. */
  remove(): void;
}

/**
 * Made with openssl (`.ci/run` installs it) for a TLS server on loopback: the tests of real TLS
 * handshakes with providers and the bench's TLS provider. Under `parent` when given (a test's own
 * scratch directory), else under the system's temporary directory.
 */
export function loopbackCertificate(parent = tmpdir()): LoopbackCertificate {
  const dir = mkdtempSync(join(parent, 'cert-'));
  const keyFile = join(dir, 'key.pem');
  const certFile = join(dir, 'cert.pem');
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  } catch (error) {
    remove();
    throw error;
  }
  return { keyFile, certFile, remove };
}
