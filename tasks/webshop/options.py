"""WebShop's options (`a2rl tasks webshop`; `-T key=value`, `[tasks.webshop]`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..options import TaskOptions


class WebShopOptions(TaskOptions):
    data_dir: str = Field("", description="folder with WebShop's data files (items_shuffle*"
                          ".json, items_ins_v2*.json, items_human_ins.json)")
    num_products: int = Field(0, ge=0, description="products used, the first N of the file "
                              "(the original's num_products; 0: all)")

    legacy_settings: ClassVar[dict[str, str]] = {"data_dir": "webshop_dir",
                                                 "num_products": "webshop_num_products"}
