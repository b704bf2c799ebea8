import test from 'ava';
import nock from 'nock';
import { BadRequestError } from 'openai';
import { NO_TOOLS_ANSWER } from '../fakes/openai-upstream.js';
import { MODEL, REASONING_MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// Deep research (`deep_research: true` on chat completions) through the edge with the official
// openai SDK: llm-api runs response-api's tool loop with google_search (Serper, nock) and scrape
// (the pages, nock) and answers as a chat completion citing the pages read. The scraped pages live
// at 127.0.0.1, which the egress guard lets through only because EGRESS_ALLOW_HOSTS lists it (as in
// the MCP scrape tests); nock answers them, so nothing listens there.
const SERPER_KEY = 'serper-test-key-research-0123';
const SITE = 'http://127.0.0.1:9';
const OTTERS = `${SITE}/otters`;
const KELP = `${SITE}/kelp`;
let p: ResponsesPlatform;

test.before(async () => {
  nock.disableNetConnect();
  nock.enableNetConnect(/^(127\.0\.0\.1|localhost)(:\d+)?$/);
  p = await startResponsesPlatform({ SERPER_API_KEY: SERPER_KEY, EGRESS_ALLOW_HOSTS: '127.0.0.1' });
});
test.after.always(async () => {
  await p?.stop();
  nock.cleanAll();
  nock.enableNetConnect();
});

const page = (title: string, text: string) => `<!doctype html><html><head><title>${title}</title></head><body><article><h1>${title}</h1><p>${text}</p></article></body></html>`;

/** Serper answers the query; the two result pages answer once each. */
function mockWeb(query: string) {
  const search = nock('https://google.serper.dev')
    .post('/search', (body) => body.q === query)
    .reply(200, {
      searchParameters: { q: query, type: 'search', engine: 'google' },
      organic: [
        { title: 'Otters of the Pacific', link: OTTERS, snippet: 'Sea otters use stones as tools.', position: 1 },
        { title: 'Kelp forests', link: KELP, snippet: 'Where otters live.', position: 2 },
      ],
    });
  const pages = nock(SITE)
    .get('/otters')
    .reply(200, page('Otters of the Pacific', 'Sea otters crack shellfish open with stones they keep in a skin pouch.'), { 'content-type': 'text/html' })
    .get('/kelp')
    .reply(200, page('Kelp forests', 'Kelp forests shelter otters from storms.'), { 'content-type': 'text/html' });
  return { search, pages };
}

const toolText = (messages: any[]) => messages.filter((m) => m.role === 'tool').map((m) => String(m.content)).join('\n');

test.serial('deep_research: plans, searches, reads the top results and answers citing the URLs it read', async (t) => {
  const web = mockWeb('sea otters tools');
  p.fake.script('research-json', [
    { content: 'I will search for how sea otters use tools.', tool_calls: [{ name: 'google_search', arguments: { q: 'sea otters tools', num: 2 } }] },
    { tool_calls: [{ name: 'scrape', arguments: { url: OTTERS } }, { name: 'scrape', arguments: { url: KELP } }] },
    { content: (messages) => (toolText(messages).includes('skin pouch') ? `Sea otters crack shellfish with stones kept in a skin pouch (${OTTERS}).` : 'I read nothing.') },
  ]);
  const { client } = await p.newClient();
  const completion: any = await client.chat.completions.create({
    model: REASONING_MODEL,
    messages: [{ role: 'user', content: 'How do sea otters use tools? #script:research-json' }],
    deep_research: true,
  } as any);

  t.true(web.search.isDone(), 'Serper was asked');
  t.true(web.pages.isDone(), 'both result pages were read');
  t.is(completion.object, 'chat.completion');
  t.is(completion.model, REASONING_MODEL);
  const choice = completion.choices[0];
  t.is(choice.finish_reason, 'stop');
  t.true(choice.message.content.includes('skin pouch'), choice.message.content);
  t.true(choice.message.content.includes(OTTERS), 'the answer cites the page it used');
  t.false(choice.message.content.includes('Sources:'), 'no list is appended when the model cited its sources');
  t.deepEqual(
    choice.message.annotations.map((a: any) => a.url_citation.url),
    [OTTERS],
  );
  const cited = choice.message.annotations[0].url_citation;
  t.is(choice.message.content.slice(cited.start_index, cited.end_index), OTTERS);
  t.is(cited.title, 'Otters of the Pacific');

  // The progress the loop made is the reasoning, in order: the plan, the search, the pages read.
  const reasoning: string = choice.message.reasoning_content;
  const order = ['I will search for how sea otters use tools.', 'Searching the web for "sea otters tools".', '2 results.', `Reading ${OTTERS}`, 'Read "Otters of the Pacific".'];
  const positions = order.map((line) => reasoning.indexOf(line));
  t.false(positions.includes(-1), reasoning);
  t.deepEqual([...positions].sort((a, b) => a - b), positions, reasoning);

  // Three steps, each a chat completion with the research instruction and only the two research tools.
  const steps = p.fake.scriptRequests('research-json');
  t.is(steps.length, 3);
  t.regex(steps[0]!.body.messages[0].content, /research assistant/);
  t.deepEqual(steps[0]!.body.tools.map((tool: any) => tool.function.name).sort(), ['google_search', 'scrape']);
  t.is(steps[0]!.body.tool_choice, 'required', 'the first step must research');
  t.false('deep_research' in steps[0]!.body, 'the steps themselves are plain completions');
  t.is(steps[2]!.body.tool_choice, 'auto', 'a step before the last may still research');

  t.is(completion.usage.total_tokens, steps.reduce((sum, s) => sum + s.body.messages.length + 3, 0), 'usage is the sum over the steps');
});

test.serial('deep_research: a model still searching at the last step is asked to answer from what it has, and does', async (t) => {
  // Each step calls a tool that does not exist (its error goes back to the model, no network needed).
  p.fake.script('research-endless', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }]);
  const { client } = await p.newClient();
  const completion: any = await client.chat.completions.create({
    model: REASONING_MODEL,
    messages: [{ role: 'user', content: 'Keep looking #script:research-endless' }],
    deep_research: true,
  } as any);
  const steps = p.fake.scriptRequests('research-endless');
  t.is(steps.length, 8, 'the research step cap');
  t.deepEqual(
    steps.map((s) => s.body.tool_choice),
    ['required', 'auto', 'auto', 'auto', 'auto', 'auto', 'auto', 'none'],
  );
  t.is(completion.choices[0].finish_reason, 'stop');
  t.is(completion.choices[0].message.content, NO_TOOLS_ANSWER);
});

test.serial('deep_research streams its progress as reasoning_content before the answer; uncited pages are listed', async (t) => {
  mockWeb('kelp otters');
  let release!: () => void;
  const progressSeen = new Promise<void>((resolve) => (release = resolve));
  p.fake.script('research-stream', [
    { tool_calls: [{ name: 'google_search', arguments: { q: 'kelp otters' } }] },
    { tool_calls: [{ name: 'scrape', arguments: { url: KELP } }] },
    // The last step answers only once the client has seen the pages being read: progress is streamed, not sent at the end.
    { gate: progressSeen, content: 'Kelp forests shelter otters from storms.' },
  ]);
  const { client } = await p.newClient();
  const stream = await client.chat.completions.create({
    model: REASONING_MODEL,
    messages: [{ role: 'user', content: 'Why do otters like kelp? #script:research-stream' }],
    deep_research: true,
    stream: true,
    stream_options: { include_usage: true },
  } as any);

  const kinds: string[] = [];
  let reasoning = '';
  let content = '';
  let finish: string | null = null;
  let usage: any = null;
  const ids = new Set<string>();
  for await (const chunk of stream as any) {
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.role) kinds.push('role');
    if (choice.delta.reasoning_content) {
      kinds.push('reasoning');
      reasoning += choice.delta.reasoning_content;
      if (reasoning.includes('Read "Kelp forests"')) release();
    }
    if (choice.delta.content) {
      kinds.push('content');
      content += choice.delta.content;
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  t.is(ids.size, 1, 'every chunk has the same id');
  t.is(kinds[0], 'role');
  t.true(kinds.lastIndexOf('reasoning') < kinds.indexOf('content'), 'progress comes before the answer');
  t.regex(reasoning, /Searching the web for "kelp otters"\.[\s\S]*Reading http:\/\/127\.0\.0\.1:9\/kelp/);
  t.is(finish, 'stop');
  t.true(content.startsWith('Kelp forests shelter otters from storms.'));
  t.true(content.includes(`Sources:\n- Kelp forests: ${KELP}`), `the model cited nothing, so the pages read are listed: ${content}`);
  t.true(usage.total_tokens > 0);
});

test.serial('deep_research with a model that does not support reasoning is a 400 naming deep_research', async (t) => {
  const { client } = await p.newClient();
  const before = p.fake.chatCount();
  const error = await t.throwsAsync(
    client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'research this' }], deep_research: true } as any),
    { instanceOf: BadRequestError },
  );
  t.is((error as BadRequestError).param, 'deep_research');
  t.regex(error!.message, new RegExp(MODEL));
  const streamed = await t.throwsAsync(
    client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'research this' }], deep_research: true, stream: true } as any),
    { instanceOf: BadRequestError },
  );
  t.is((streamed as BadRequestError).param, 'deep_research');
  t.is(p.fake.chatCount(), before, 'nothing went upstream');
});
