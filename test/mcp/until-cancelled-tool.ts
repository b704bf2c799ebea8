import { z } from 'zod';
import { defineTool } from '../../services/mcp-tools/tools/tool.js';

/** A tool named `wait` whose calls run until they are cancelled; `onStart` is told when one begins. */
export function untilCancelledTool(onStart?: () => void) {
  return defineTool({
    name: 'wait',
    title: 'Wait',
    description: 'Runs until cancelled.',
    input: z.object({}).strict(),
    output: z.object({}),
    annotations: {},
    run: (ctx) =>
      new Promise((_resolve, reject) => {
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
        onStart?.();
      }),
  });
}
