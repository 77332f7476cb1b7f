/**
 * A handle on an object a test hook creates later (beforeAll/beforeEach):
 * declared once at the top of a file, it forwards every read and write to the
 * current object, so a shared preamble can hand out `const h = useX()` instead of a
 * `let` each file assigns. Reading it before the hook ran throws.
 */
export function lateBound<T extends object>(what: string, current: () => T | undefined): T {
  const target = (): T => {
    const value = current();
    if (value === undefined) throw new Error(`${what} is read before the hook that creates it ran`);
    return value;
  };
  return new Proxy({} as T, {
    get: (_, key) => Reflect.get(target(), key) as unknown,
    set: (_, key, value) => Reflect.set(target(), key, value),
    has: (_, key) => Reflect.has(target(), key),
    ownKeys: () => Reflect.ownKeys(target()),
    getOwnPropertyDescriptor: (_, key) => {
      const d = Reflect.getOwnPropertyDescriptor(target(), key);
      // The proxy's own target is an empty extensible object: report every forwarded key as configurable.
      return d ? { ...d, configurable: true } : undefined;
    },
  });
}
