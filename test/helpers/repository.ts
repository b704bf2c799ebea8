/**
 * The repository itself, for the tests that list or parse its source files. `npm test` runs the
 * suite from a compiled copy (scripts/test-tree.mjs), whose folders also hold the generated
 * JavaScript and which has no git metadata; it names the repository in TEST_SOURCE_ROOT.
 */
export const REPOSITORY_ROOT = process.env.TEST_SOURCE_ROOT ?? process.cwd();
