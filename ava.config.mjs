// Test files run in separate processes (isolation per file: own schema, exchange, key prefix).
// Tests that stop and start a server of their own (never a shared one) run afterwards, alone
// (ava.serial.config.mjs: test/serial and test/reliability/*-restart): booting and restarting a
// node is heavy, and their bounds must hold without other files competing for the CPU.
// `npm test` runs them from a compiled copy of the repository (TEST_TREE=compiled, set by
// scripts/test.mjs: plain JavaScript with source maps); run directly, ava loads the TypeScript
// through tsx.
// The extension and node arguments of a test file (scripts/test.mjs starts its last step the same way).
const compiled = process.env.TEST_TREE === 'compiled';
export const ext = compiled ? 'js' : 'ts';
export const nodeArguments = compiled ? ['--enable-source-maps'] : ['--import=tsx'];

export default {
  files: [`test/**/*.test.${ext}`, '!test/serial/**', `!test/reliability/**/*-restart.test.${ext}`],
  ...(compiled ? {} : { extensions: { ts: 'module' } }),
  nodeArguments,
  workerThreads: false,
  concurrency: 2,
  timeout: '90s',
  environmentVariables: { NODE_ENV: 'test' },
};
