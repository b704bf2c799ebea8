import { once } from 'node:events';
import net from 'node:net';

/**
 * Sends `request` as raw bytes to 127.0.0.1:`port` and collects everything the server answers
 * until it closes the connection (Latin-1, byte for byte): for requests no HTTP client would send
 * (smuggling, no Host, a body cut short).
 */
export async function rawExchange(port: number, request: string): Promise<string> {
  const socket = net.connect(port, '127.0.0.1');
  let answer = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk) => (answer += chunk));
  socket.on('error', () => {});
  socket.write(request);
  await once(socket, 'close');
  return answer;
}
