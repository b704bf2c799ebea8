/**
 * An MCP tool as the admin API shows it (GET /v1/admin/mcp/tools). A declaration file, so the web
 * console can read the same shape without compiling service code into its bundle.
 */
export interface AdminTool {
  id: string;
  object: 'mcp_tool';
  name: string;
  title: string;
  description: string;
  enabled: boolean;
  reason: string | null;
  /** Whether the tool can work in this deployment, whatever its switch says (e.g. a search backend is configured). */
  available: boolean;
  unavailable_reason: string | null;
  updated_at: string | null;
  updated_by: string | null;
}
