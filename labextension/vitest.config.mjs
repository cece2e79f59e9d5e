import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'jsdom',
    include: ['test/**/*.test.ts'],
    setupFiles: ['test/jsdom.ts'],
    // test/plugin.test.ts imports the plugin, hence @jupyterlab/ui-components: its @jupyter/web-components
    // imports files without their extension, which only Vite (not Node's ESM loader) resolves.
    server: { deps: { inline: [/@jupyter\/web-components/] } }
  }
});
