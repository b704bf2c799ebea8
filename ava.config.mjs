// Test files run in separate processes (isolation per file: own schema, exchange, key prefix).
// Tests that stop and start a server of their own (never a shared one) run afterwards, alone
// (ava.serial.config.mjs: test/serial and test/reliability/*-restart): booting and restarting a
// node is heavy, and their bounds must hold without other files competing for the CPU.
export default {
  files: ['test/**/*.test.ts', '!test/serial/**', '!test/reliability/**/*-restart.test.ts'],
  extensions: { ts: 'module' },
  nodeArguments: ['--import=tsx'],
  workerThreads: false,
  concurrency: 2,
  timeout: '90s',
  environmentVariables: { NODE_ENV: 'test' },
};
