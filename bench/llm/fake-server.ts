// Child process: the fake OpenAI-compatible upstream, alone on its core. Prints {"url"} once listening.
import { startFakeUpstream } from '../../test/fakes/openai-upstream.js';

const fake = await startFakeUpstream({ name: 'bench', models: [{ id: 'bench-model' }] });
process.stdout.write(`${JSON.stringify({ url: fake.url })}\n`);
process.on('SIGTERM', () => void fake.close().then(() => process.exit(0)));
