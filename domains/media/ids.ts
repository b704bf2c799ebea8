/**
 * Media ids: `jan_` followed by a lowercase ULID. The format is the kit's (kit/core), because
 * llm-api and response-api find references too and may not import this domain; it is re-exported
 * here for the media service and workers.
 */
export { isMediaId, MEDIA_ID_PATTERN, MEDIA_ID_SOURCE, newMediaId } from '../../services/kit/core/index.js';
