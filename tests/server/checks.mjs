// checks.mjs - what the openai-client test scripts share: loading the pinned openai package
// and a check() that prints "ok WHAT" or "FAIL WHAT" (and exits 1 on the first failure).
import { pathToFileURL } from 'node:url';
import path from 'node:path';

// The OpenAI class of the package installed at pkgDir (build-npm/node_modules/openai).
export async function loadOpenAI(pkgDir) {
  const { default: OpenAI } = await import(pathToFileURL(path.join(pkgDir, 'index.mjs')).href);
  return OpenAI;
}

let passed = 0;
export function check(cond, what) {
  if (!cond) {
    console.log(`FAIL ${what}`);
    process.exit(1);
  }
  passed++;
  console.log(`ok ${what}`);
}
export function checksPassed() { return passed; }
