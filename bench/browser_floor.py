"""The floor of the browser benchmark: a minimal Playwright script reusing one tab.

Run with the benchmark venv's Python (pip's `playwright`, no browser download): connects over
CDP to a Chromium the driver started, opens ONE tab and reads every URL in it, each as soon as
its cards are in the DOM: `goto` (load event), wait for `article.listing`, `page.content()`.
Nothing else: no new context, no fixed wait, no screenshot, no leaving the page. Prints one
JSON line: pages read, cards seen, statuses.

    python browser_floor.py WS_URL URLS_FILE
"""

import asyncio
import json
import sys

from playwright.async_api import async_playwright


async def main(ws, urls):
    out = {"pages": 0, "cards": 0, "statuses": {}}
    async with async_playwright() as p:
        browser = await p.chromium.connect_over_cdp(ws)
        context = browser.contexts[0]
        page = await context.new_page()
        for url in urls:
            resp = await page.goto(url, wait_until="load")
            await page.wait_for_selector("article.listing", state="attached")
            html = await page.content()
            out["pages"] += 1
            out["cards"] += html.count('<article class="listing"')
            status = str(resp.status if resp else None)
            out["statuses"][status] = out["statuses"].get(status, 0) + 1
        await page.close()
        await browser.close()  # over CDP: disconnects, the browser keeps running
    print(json.dumps(out))


if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        asyncio.run(main(sys.argv[1], [u.strip() for u in f if u.strip()]))
