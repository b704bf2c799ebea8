import base, { ext } from './ava.config.mjs';

export default { ...base, files: [`test/serial/**/*.test.${ext}`, `test/reliability/**/*-restart.test.${ext}`], concurrency: 1, serial: true, timeout: '180s' };
