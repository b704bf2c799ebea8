import type { Migration } from '../../services/kit/index.js';
import { chatResource } from '../../services/llm-api/chat/index.js';
import { requestsResource } from '../../services/llm-api/requests/index.js';
import { usageResource } from '../../services/llm-api/usage/index.js';

// llm-api's tables for the usage and recent-requests batches, migrated as the platform migrates
// them: the owning resources' lists (the raw usage table belongs to chat, its rollup to usage), in
// name order, so a bench never measures a schema the platform no longer has.
const inOrder = (migrations: Migration[]) => [...migrations].sort((a, b) => a.name.localeCompare(b.name));
export const usageMigrations = inOrder([...chatResource.migrations, ...usageResource.migrations]);
export const requestLogMigrations = inOrder(requestsResource.migrations);
