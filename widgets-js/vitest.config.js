import { defineConfig } from "vitest/config";

export default defineConfig({
  test: { environment: "happy-dom", include: ["test/**/*.test.js"], setupFiles: ["test/canvas.js"] },
});
