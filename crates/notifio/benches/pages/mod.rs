//! Synthetic result pages shared by the extraction benches (a generic portal page and a
//! Facebook-shaped one); the real pages come from `shared/fixtures/`.

use std::fmt::Write as _;

fn card(s: &mut String, i: usize) {
    let _ = write!(
        s,
        "<article class=\"listing\" data-id=\"{i}\"><a class=\"listing-link\" href=\"/listing/{i}\"><h2 class=\"title\">Bright flat number {i} near the park</h2></a><div class=\"gallery\"><img src=\"/p/{i}.jpg\" alt=\"\"><span class=\"badge\">New</span></div><span class=\"price\">1.{:03} €/mes</span><span class=\"rooms\">{} hab.</span><span class=\"area\">{} m²</span><p class=\"description\">A lovely flat with lots of light, a balcony over a quiet street, fitted kitchen and a lift. Close to the metro and shops; available from next month for long lets only.</p><div class=\"agent\"><span>Agency {i}</span><button class=\"contact\">Contact</button></div></article>",
        i % 1000,
        1 + i % 4,
        40 + i % 80
    );
}

/// A result page of `size` bytes shaped like a real portal's: `cards` listing cards amid the
/// usual chrome (menus, an inline state script, an SVG sprite, filters, footer links).
pub(crate) fn generic_page(size: usize, cards: usize) -> Vec<u8> {
    let mut s = String::from(
        "<!DOCTYPE html><html><head><title>Fake portal</title><meta charset=\"utf-8\"><style>.listing{margin:0}</style></head><body><nav><ul>",
    );
    for i in 0..60 {
        let _ = write!(
            s,
            "<li class=\"nav-item\"><a href=\"/city/{i}\">City {i}</a></li>"
        );
    }
    s.push_str("</ul></nav><svg style=\"display:none\">");
    for i in 0..80 {
        let _ = write!(
            s,
            "<symbol id=\"icon-{i}\" viewBox=\"0 0 24 24\"><path d=\"M12 2C6.48 2 2 6.48 2 12s4.48 10 10 10 10-4.48 10-10S17.52 2 12 2zm0 18c-4.41 0-8-3.59-8-8s3.59-8 8-8 8 3.59 8 8-3.59 8-8 8z\"/></symbol>"
        );
    }
    s.push_str("</svg><aside class=\"filters\"><form>");
    for i in 0..120 {
        let _ = write!(
            s,
            "<label class=\"filter\"><input type=\"checkbox\" name=\"f{i}\"> Option {i}</label>"
        );
    }
    s.push_str("</form></aside><section class=\"results\">");
    for i in 0..cards {
        card(&mut s, i);
    }
    s.push_str("</section><footer><ul>");
    let mut i = 0;
    let state_at = size.saturating_sub(size / 3);
    while s.len() < state_at {
        let _ = write!(
            s,
            "<li><a href=\"/links/{i}\" class=\"footer-link\">Flats for rent in district {i}</a></li>"
        );
        i += 1;
    }
    s.push_str("</ul></footer><script>window.__STATE__ = {\"items\":[");
    let mut j = 0;
    while s.len() < size - 100 {
        let _ = write!(s, "{{\"k\":{j},\"v\":\"value {j} with some text\"}},");
        j += 1;
    }
    s.push_str("{}]};</script></body></html>");
    s.into_bytes()
}

/// A Facebook-shaped search page of about `size` bytes: many `data-sjs` JSON blocks of
/// unrelated state, and one Marketplace feed of 24 listings near the end.
pub(crate) fn facebook_page(size: usize) -> Vec<u8> {
    let mut s = String::from(
        "<!DOCTYPE html><html><head><title>Marketplace</title><script type=\"application/json\" data-sjs>{\"require\":[[\"CurrentUserInitialData\",[],{\"USER_ID\":\"100012345678901\"},1]]}</script></head><body>",
    );
    let mut block = 0;
    while s.len() < size - 20_000 {
        s.push_str("<script type=\"application/json\" data-sjs>{\"require\":[[\"ScheduledServerJS\",\"handle\",null,[{\"__bbox\":{\"define\":[");
        for j in 0..40 {
            let _ = write!(
                s,
                "[\"Module{block}_{j}\",[],{{\"id\":\"{block}{j}\",\"enabled\":true,\"label\":\"Some configuration string \\u00e9 {j}\",\"values\":[1,2,3,4,5,6,7,8]}},{j}],"
            );
        }
        s.push_str("[\"End\",[],{},0]]}}]]]}</script>\n");
        block += 1;
    }
    s.push_str("<script type=\"application/json\" data-sjs>{\"require\":[[\"ScheduledServerJS\",\"handle\",null,[{\"__bbox\":{\"require\":[[\"RelayPrefetchedStreamCache\",\"next\",[],[\"adp_CometMarketplaceSearchContentContainerQueryRelayPreloader_1\",\"0\",{\"__bbox\":{\"result\":{\"data\":{\"marketplace_search\":{\"feed_units\":{\"edges\":[");
    for i in 0..24 {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"node\":{{\"__typename\":\"MarketplaceFeedListingStoryObject\",\"listing\":{{\"id\":\"10000000000{i:05}\",\"primary_listing_photo\":{{\"image\":{{\"uri\":\"https:\\/\\/scontent.xx.fbcdn.net\\/v\\/{i}.jpg\"}}}},\"listing_price\":{{\"formatted_amount\":\"\\u20ac1,{i:03}\",\"amount\":\"1{i:03}.00\"}},\"location\":{{\"reverse_geocode\":{{\"city\":\"Madrid\",\"state\":\"MD\"}}}},\"is_sold\":{},\"is_pending\":false,\"marketplace_listing_title\":\"Flat {i} in Madrid\",\"custom_sub_titles_with_rendering_flags\":[{{\"subtitle\":\"2 beds \\u00b7 1 bath\"}}]}}}},\"cursor\":null}}",
            i % 7 == 0
        );
    }
    s.push_str("],\"page_info\":{\"has_next_page\":true}}}}}}]]]}}]]]}</script></body></html>");
    s.into_bytes()
}
