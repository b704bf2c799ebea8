/** The signed-in user as `GET /auth/me` describes them. */
export interface Me {
  id: string;
  email: string | null;
  username: string | null;
  is_admin: boolean;
  is_guest: boolean;
}

export interface List<T> {
  object: 'list';
  data: T[];
}
