import type { Knex } from 'knex';

/** SQL of the media domain: the only file that writes queries for `media` and `media_objects`. */

export type MediaState = 'pending' | 'completing' | 'ready' | 'merged';

export interface MediaRow {
  id: string;
  user_id: string;
  state: MediaState;
  sha256: string | null;
  mime_type: string;
  bytes: number;
  width: number | null;
  height: number | null;
  filename: string | null;
  upload_key: string | null;
  merged_into: string | null;
  created_at: number;
  expires_at: number | null;
}

export interface ReadyFields {
  sha256: string;
  mime_type: string;
  bytes: number;
  width: number;
  height: number;
}

const toRow = (row: Record<string, unknown> | undefined): MediaRow | null =>
  row ? ({ ...row, bytes: Number(row.bytes), created_at: Number(row.created_at), expires_at: row.expires_at === null ? null : Number(row.expires_at) } as MediaRow) : null;

/** Serialises a user's media changes (uploads, reservations, deletes) for one transaction. */
async function lockUser(trx: Knex.Transaction, userId: string): Promise<void> {
  await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`media:${userId}`]);
}

export function createMediaStore(knex: Knex) {
  return {
    /** Runs `work` in one transaction (the store's own queries take the handle it is given). */
    transaction<T>(work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
      return knex.transaction(work);
    },

    async byId(id: string, db: Knex = knex): Promise<MediaRow | null> {
      return toRow(await db('media').where({ id }).first());
    },

    /** A ready media of this user, or null (another user's id is the same as an unknown one). */
    async readyOf(userId: string, id: string): Promise<MediaRow | null> {
      return toRow(await knex('media').where({ id, user_id: userId, state: 'ready' }).first());
    },

    async readyManyOf(userId: string, ids: string[]): Promise<MediaRow[]> {
      if (ids.length === 0) return [];
      const rows = await knex('media').where({ user_id: userId, state: 'ready' }).whereIn('id', ids);
      return rows.map((r) => toRow(r)!);
    },

    async list(userId: string, page: { limit: number; offset: number }): Promise<{ rows: MediaRow[]; total: number }> {
      const [rows, count] = await Promise.all([
        knex('media').where({ user_id: userId, state: 'ready' }).orderBy('id', 'desc').limit(page.limit).offset(page.offset),
        knex('media').where({ user_id: userId, state: 'ready' }).count<{ count: string | number }[]>({ count: '*' }),
      ]);
      return { rows: rows.map((r) => toRow(r)!), total: Number(count[0]?.count ?? 0) };
    },

    lockUser,

    /**
     * Bytes the user holds at `now` (unix seconds): ready media, completed uploads still being
     * finalised (`completing`, at their declared size until finalised or refused), and open
     * reservations (`pending` and unexpired, at their declared size). A reservation past its
     * expiry holds nothing, whether or not the sweep has removed its row yet. `db`: the
     * transaction holding the user's lock (the authoritative check), or none (a cheap pre-check).
     */
    async usedBytes(db: Knex | Knex.Transaction | undefined, userId: string, now: number, excludeId?: string): Promise<number> {
      const q = (db ?? knex)('media')
        .where({ user_id: userId })
        .where((open) => open.whereIn('state', ['ready', 'completing']).orWhere((pending) => pending.where({ state: 'pending' }).andWhere('expires_at', '>', now)))
        .sum<{ total: string | number | null }[]>({ total: 'bytes' });
      if (excludeId) q.whereNot({ id: excludeId });
      const [row] = await q;
      return Number(row?.total ?? 0);
    },

    async readyBySha(trx: Knex.Transaction, userId: string, sha256: string): Promise<MediaRow | null> {
      return toRow(await trx('media').where({ user_id: userId, sha256, state: 'ready' }).first());
    },

    async insert(trx: Knex | Knex.Transaction, row: MediaRow): Promise<void> {
      await trx('media').insert(row);
    },

    /** pending → completing, only while the reservation is open; whether this call made the transition. */
    async claimPending(trx: Knex.Transaction, id: string, userId: string, now: number): Promise<boolean> {
      const [updated] = await trx('media').where({ id, user_id: userId, state: 'pending' }).andWhere('expires_at', '>', now).update({ state: 'completing' }).returning('id');
      return Boolean(updated);
    },

    /** completing → pending (a complete that came before any upload): the client may still upload. */
    async revertCompleting(id: string): Promise<void> {
      await knex('media').where({ id, state: 'completing' }).update({ state: 'pending' });
    },

    /**
     * Runs `work` (a direct upload's staging write) only while the reservation is open (pending,
     * unexpired at `now`), holding its row lock: a concurrent complete (claimPending) or expiry
     * waits for `work` to finish, and `work` never starts after either. Whether it ran.
     */
    async whileReservationOpen(id: string, now: number, work: () => Promise<void>): Promise<boolean> {
      return knex.transaction(async (trx) => {
        const open = await trx('media').where({ id, state: 'pending' }).andWhere('expires_at', '>', now).forUpdate().first('id');
        if (!open) return false;
        await work();
        return true;
      });
    },

    async makeReady(trx: Knex.Transaction, id: string, fields: ReadyFields): Promise<void> {
      await trx('media').where({ id }).update({ ...fields, state: 'ready', expires_at: null });
    },

    async markMerged(trx: Knex.Transaction, id: string, into: string, expiresAt: number): Promise<void> {
      await trx('media').where({ id }).update({ state: 'merged', merged_into: into, expires_at: expiresAt });
    },

    async clearUploadKey(id: string): Promise<void> {
      await knex('media').where({ id }).update({ upload_key: null });
    },

    /**
     * Deletes a user's ready media; returns it (null when not theirs or unknown). Under the user's
     * lock, like the transaction that records an upload: otherwise that transaction's dedup check
     * could still see this row while it is being deleted, answer (or merge a completed upload into)
     * it, and the object, its last reference gone, would be collected under the upload. Ordered,
     * an upload either comes first (and answers the media this delete then removes) or sees the
     * media gone and records its own, holding the object's row against the collector.
     */
    async deleteReady(trx: Knex.Transaction, userId: string, id: string): Promise<MediaRow | null> {
      await lockUser(trx, userId);
      const [row] = await trx('media').where({ id, user_id: userId, state: 'ready' }).del().returning('*');
      return toRow(row);
    },

    /**
     * Cancels a user's open reservation: deletes the row (waiting for a direct upload writing to it,
     * which holds its lock), then `removeStaging` runs before the commit, so a failure keeps the
     * row (the expiry still finds it) and no upload lands once it is gone. Null when not one.
     */
    async deletePending(userId: string, id: string, removeStaging: () => Promise<void>): Promise<MediaRow | null> {
      return knex.transaction(async (trx) => {
        const [row] = await trx('media').where({ id, user_id: userId, state: 'pending' }).del().returning('*');
        if (!row) return null;
        await removeStaging();
        return toRow(row);
      });
    },

    /**
     * Deletes a reservation refused at finalisation: `completing`, or `pending` again when a
     * concurrent finalisation found its staging object already removed by the refusal and put it
     * back; never a media another finalisation made ready (or merged) meanwhile.
     */
    async deleteRefused(id: string): Promise<void> {
      await knex('media').where({ id }).whereIn('state', ['completing', 'pending']).del();
    },

    /** Deletes one expired reservation or merged leftover, only if it is still one at `now`. */
    async deleteExpired(id: string, now: number): Promise<void> {
      await knex('media').where({ id }).whereIn('state', ['pending', 'merged']).andWhere('expires_at', '<=', now).del();
    },

    /** Reservations past their expiry, and merged rows kept only to answer repeated completes. */
    async expiredReservations(now: number, limit: number): Promise<MediaRow[]> {
      const rows = await knex('media').whereIn('state', ['pending', 'merged']).andWhere('expires_at', '<=', now).orderBy('expires_at').limit(limit);
      return rows.map((r) => toRow(r)!);
    },

    /** Ready rows whose staging object was not removed yet (finalisation stopped before that step). */
    async readyWithUploadKey(limit: number): Promise<MediaRow[]> {
      const rows = await knex('media').where({ state: 'ready' }).whereNotNull('upload_key').limit(limit);
      return rows.map((r) => toRow(r)!);
    },

    /** Completed uploads whose finalisation has not finished (crash between complete and ready). */
    async stuckCompleting(now: number, limit: number): Promise<MediaRow[]> {
      const rows = await knex('media').where({ state: 'completing' }).andWhere('expires_at', '<=', now).limit(limit);
      return rows.map((r) => toRow(r)!);
    },

    // --- content-addressed objects ---

    /** Marks an object as about to be written (creates or refreshes its row); commits at once. */
    async touchObject(sha256: string, bytes: number, mimeType: string, now: Date): Promise<void> {
      await knex('media_objects')
        .insert({ sha256, bytes, mime_type: mimeType, touched_at: now })
        .onConflict('sha256')
        .merge({ touched_at: now });
    },

    /**
     * Holds the object's row until the transaction ends (a share lock: the collector, which locks
     * it for update, waits, then sees what this transaction committed); whether the row exists.
     */
    async holdObject(trx: Knex.Transaction, sha256: string): Promise<boolean> {
      return Boolean(await trx('media_objects').where({ sha256 }).forShare().first('sha256'));
    },

    async referenceCount(db: Knex | Knex.Transaction, sha256: string): Promise<number> {
      const [row] = await db('media').where({ sha256 }).whereIn('state', ['ready', 'completing']).count<{ count: string | number }[]>({ count: '*' });
      return Number(row?.count ?? 0);
    },

    /**
     * Collects one object if nothing references it and it is older than `graceCutoff`: under the
     * object row's lock (a concurrent upload's touch waits for it), `removeObject` deletes the
     * stored bytes, then the row goes. Returns whether it was collected.
     */
    async collectObject(sha256: string, graceCutoff: Date, removeObject: () => Promise<void>): Promise<boolean> {
      return knex.transaction(async (trx) => {
        const row = await trx('media_objects').where({ sha256 }).forUpdate().first();
        if (!row) return false;
        if (new Date(row.touched_at) > graceCutoff) return false;
        const [refs] = await trx('media').where({ sha256 }).whereIn('state', ['ready', 'completing']).count<{ count: string | number }[]>({ count: '*' });
        if (Number(refs?.count ?? 0) > 0) return false;
        await removeObject();
        await trx('media_objects').where({ sha256 }).del();
        return true;
      });
    },

    /** Objects no media row references and nobody touched since `graceCutoff`. */
    async unreferencedObjects(graceCutoff: Date, limit: number): Promise<string[]> {
      const rows = await knex('media_objects as o')
        .where('o.touched_at', '<=', graceCutoff)
        .whereNotExists(knex('media as m').whereRaw('m.sha256 = o.sha256').whereIn('m.state', ['ready', 'completing']))
        .select('o.sha256')
        .limit(limit);
      return rows.map((r: { sha256: string }) => r.sha256);
    },

    // --- staging keys whose upload URL may still write (see migrations.ts, `media_staging`) ---

    async rememberStaging(trx: Knex | Knex.Transaction, uploadKey: string, deleteAfter: number): Promise<void> {
      await trx('media_staging').insert({ upload_key: uploadKey, delete_after: deleteAfter }).onConflict('upload_key').merge();
    },

    /** Staging keys due at `now` that no open or completing reservation still uses. */
    async dueStaging(now: number, limit: number): Promise<string[]> {
      const rows = await knex('media_staging as s')
        .where('s.delete_after', '<=', now)
        .whereNotExists(knex('media as m').whereRaw('m.upload_key = s.upload_key').whereIn('m.state', ['pending', 'completing']))
        .orderBy('s.delete_after')
        .select('s.upload_key')
        .limit(limit);
      return rows.map((r: { upload_key: string }) => r.upload_key);
    },

    async forgetStaging(uploadKey: string): Promise<void> {
      await knex('media_staging').where({ upload_key: uploadKey }).del();
    },

    async objectExists(sha256: string): Promise<boolean> {
      return Boolean(await knex('media_objects').where({ sha256 }).first());
    },
  };
}

export type MediaStore = ReturnType<typeof createMediaStore>;
