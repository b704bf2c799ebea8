import { plannedRoute } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';

/**
 * Endpoints of the chat-completions family that clients call and the catalog already describes
 * (models flagged `supports_embeddings`, `supports_images`, `supports_audio`), but that llm-api does
 * not serve yet. They answer 501 `not_implemented` instead of 404, so a client can tell "not built"
 * from "wrong address"; building one replaces its entry here with a real route.
 */
const tag = 'planned';

export const plannedResource: LlmApiResource = {
  name: 'planned',
  migrations: [],
  routes: () => [
    plannedRoute({ method: 'post', path: '/v1/embeddings', summary: 'Embeddings', tag }),
    plannedRoute({ method: 'post', path: '/v1/images/generations', summary: 'Image generation', tag }),
    plannedRoute({ method: 'post', path: '/v1/images/edits', summary: 'Image edits', tag }),
    plannedRoute({ method: 'post', path: '/v1/audio/speech', summary: 'Text to speech', tag }),
    plannedRoute({ method: 'post', path: '/v1/audio/transcriptions', summary: 'Speech to text', tag }),
  ],
};
