import type OpenAI from 'openai';

/**
 * The fields every record of one chat completion carries, whoever keeps it (the edge's access line,
 * llm-api's recent-requests log): the request, who made it, the model and the token counts the
 * answer reported. Each test adds the fields its record names its own way (route, provider).
 */
export function chatRecordFields(who: { userId: string; keyId: string }, model: string, usage: OpenAI.CompletionUsage) {
  return {
    method: 'POST',
    path: '/v1/chat/completions',
    status: 200,
    auth_method: 'apikey',
    user_id: who.userId,
    key_id: who.keyId,
    model,
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.total_tokens,
  };
}
