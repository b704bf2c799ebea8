import base from './ava.config.mjs';

export default { ...base, files: ['test/serial/**/*.test.ts', 'test/reliability/**/*-restart.test.ts'], concurrency: 1, serial: true, timeout: '180s' };
