import { jsonSchemaOf, type McpTool, type ToolAnnotations } from './tool.js';

/** What `tools/list` publishes for one tool; computed once at start (the list is stable between calls). */
export interface ToolDescriptor {
  name: string;
  title: string;
  description: string;
  inputSchema: { type: 'object'; [key: string]: unknown };
  outputSchema: { type: 'object'; [key: string]: unknown };
  annotations: ToolAnnotations & { title: string };
}

export interface ToolCatalog {
  /** Every tool this build knows, in their fixed order. */
  all: McpTool[];
  get(name: string): McpTool | undefined;
  descriptor(name: string): ToolDescriptor;
}

export function createCatalog(tools: McpTool[]): ToolCatalog {
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  const descriptors = new Map(
    tools.map((tool) => [
      tool.name,
      {
        name: tool.name,
        title: tool.title,
        description: tool.description,
        inputSchema: jsonSchemaOf(tool.input, 'input') as ToolDescriptor['inputSchema'],
        outputSchema: jsonSchemaOf(tool.output, 'output') as ToolDescriptor['outputSchema'],
        annotations: { title: tool.title, ...tool.annotations },
      } satisfies ToolDescriptor,
    ]),
  );
  return {
    all: tools,
    get: (name) => byName.get(name),
    descriptor: (name) => descriptors.get(name)!,
  };
}
