// Test files run in separate processes (isolation per file: own schema, exchange, key prefix).
// Tests that restart a shared server live in test/serial and run afterwards, alone (ava.serial.config.mjs).
export default {
  files: ['test/**/*.test.ts', '!test/serial/**'],
  extensions: { ts: 'module' },
  nodeArguments: ['--import=tsx'],
  workerThreads: false,
  concurrency: 2,
  timeout: '90s',
  environmentVariables: { NODE_ENV: 'test' },
};
