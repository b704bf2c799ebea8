// Test files run in separate processes (isolation per file: own schema, exchange, key prefix).
// Tests that restart a shared server live in test/serial and run afterwards, alone (ava.serial.config.mjs);
// so do the reliability suites that stop and start servers of their own (test/reliability/*-restart),
// whose bounds must hold without other files competing for the CPU.
export default {
  files: ['test/**/*.test.ts', '!test/serial/**', '!test/reliability/**/*-restart.test.ts'],
  extensions: { ts: 'module' },
  nodeArguments: ['--import=tsx'],
  workerThreads: false,
  concurrency: 2,
  timeout: '90s',
  environmentVariables: { NODE_ENV: 'test' },
};
